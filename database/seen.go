package database

import (
	"context"
	"strings"
)

// Seen reads a run's alert's earlier runs: the seen-before line of a thread
// and a run page ("3rd time since Tuesday on this instance").
type Seen struct{ d Dialect }

// SeenRow is one earlier run of the same alert on the same instance or
// model: its verdict (JSON, "" for none) and its labels to tell which.
type SeenRow struct {
	ID              string
	CreatedAt       int64
	Verdict         string
	Instance, Model string
}

// SeenFilter selects the earlier runs of alertname on instance or on model
// created in [Since, Before), but Exclude (the run itself), newest first, at
// most Limit. An empty instance or model matches nothing.
type SeenFilter struct {
	Alertname, Instance, Model string
	Since, Before              int64
	Exclude                    string
	Limit                      int
}

// Query is the statement and arguments of f: two range reads of the seen
// indexes, one per label, joined (a run on both counts once). A count that
// reaches Limit is at least that many.
func (s Seen) Query(f SeenFilter) (string, []any) {
	part := func(col, arg string) string {
		return `SELECT id, created_at, COALESCE(verdict, '') AS verdict, instance, model_name FROM autocapture_runs
			WHERE ` + col + ` = ` + arg + ` AND ` + arg + ` <> '' AND alertname = $1 AND created_at >= $4 AND created_at < $5 AND id <> $6`
	}
	// Each read stops at the limit (the index's newest entries first), so
	// the cost is the limit's, not the alert's history's.
	q := `SELECT id, created_at, verdict, instance, model_name FROM (
		SELECT * FROM (` + part("instance", "$2") + ` ORDER BY created_at DESC LIMIT $7) by_instance
		UNION SELECT * FROM (` + part("model_name", "$3") + ` ORDER BY created_at DESC LIMIT $7) by_model
		) seen ORDER BY created_at DESC, id DESC LIMIT $7`
	return q, []any{f.Alertname, strings.TrimSpace(f.Instance), strings.TrimSpace(f.Model), f.Since, f.Before, f.Exclude, f.Limit}
}

// List runs f's query.
func (s Seen) List(ctx context.Context, q RowsQuerier, f SeenFilter) ([]SeenRow, error) {
	query, args := s.Query(f)
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []SeenRow
	for rows.Next() {
		var r SeenRow
		if err := rows.Scan(&r.ID, &r.CreatedAt, &r.Verdict, &r.Instance, &r.Model); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
