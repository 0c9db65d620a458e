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

// label is the expression the autocapture_runs_seen_* indexes hold: a label of the
// stored alert.
func (s Seen) label(name string) string {
	if s.d == Postgres {
		return "(CAST(alert AS jsonb) -> 'labels' ->> '" + name + "')"
	}
	return "json_extract(alert, '$.labels." + name + "')"
}

// Query is the statement and arguments of f: two range reads of the seen
// indexes, one per label, joined (a run on both counts once). A count that
// reaches Limit is at least that many.
func (s Seen) Query(f SeenFilter) (string, []any) {
	inst, model := s.label("instance"), s.label("model_name")
	part := func(expr, arg string) string {
		return `SELECT id, created_at, COALESCE(verdict, '') AS verdict, COALESCE(` + inst + `, '') AS inst,
			COALESCE(` + model + `, '') AS model FROM autocapture_runs
			WHERE alertname = $1 AND ` + expr + ` = ` + arg + ` AND ` + arg + ` <> '' AND created_at >= $4 AND created_at < $5 AND id <> $6`
	}
	// Each read stops at the limit (the index's newest entries first), so
	// the cost is the limit's, not the alert's history's.
	q := `SELECT id, created_at, verdict, inst, model FROM (
		SELECT * FROM (` + part(inst, "$2") + ` ORDER BY created_at DESC LIMIT $7) by_instance
		UNION SELECT * FROM (` + part(model, "$3") + ` ORDER BY created_at DESC LIMIT $7) by_model
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
