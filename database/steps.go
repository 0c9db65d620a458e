package database

import (
	"context"

	"github.com/autocapture/autocapture/internal/untrusted"
	"github.com/autocapture/autocapture/vocab"
)

// Steps is autocapture_steps: each finished step's record (JSON), with the
// cooldown key it held.
type Steps struct{}

// Step is a step's row.
type Step struct {
	RunID, Plan, ID, Kind, CooldownKey string
	Status                             vocab.Status
	FinishedAt                         int64  // Unix ms
	Record                             string // JSON
}

// Add records st unless its step was recorded before (ON CONFLICT DO NOTHING).
func (Steps) Add(ctx context.Context, q Querier, st Step) error {
	_, err := q.ExecContext(ctx, `INSERT INTO autocapture_steps
		(run_id, plan, step_id, kind, status, cooldown_key, finished_at, record)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING`,
		st.RunID, st.Plan, st.ID, st.Kind, string(st.Status), untrusted.Key(st.CooldownKey), st.FinishedAt, st.Record)
	return err
}

// Get is the record of one step (sql.ErrNoRows: none).
func (Steps) Get(ctx context.Context, q RowQuerier, runID, plan, stepID string) (string, error) {
	var raw string
	err := q.QueryRowContext(ctx, `SELECT record FROM autocapture_steps WHERE run_id = $1 AND plan = $2 AND step_id = $3`,
		runID, plan, stepID).Scan(&raw)
	return raw, err
}

// List returns the run's records in the order they finished.
func (Steps) List(ctx context.Context, q RowsQuerier, runID string) ([]string, error) {
	return records(ctx, q, `SELECT record FROM autocapture_steps WHERE run_id = $1
		ORDER BY finished_at, plan, step_id`, runID)
}

// Records returns the run's records in no particular order.
func (Steps) Records(ctx context.Context, q RowsQuerier, runID string) ([]string, error) {
	return records(ctx, q, `SELECT record FROM autocapture_steps WHERE run_id = $1`, runID)
}

// records runs query, which reads one text column, and returns its values.
func records(ctx context.Context, q RowsQuerier, query string, args ...any) ([]string, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var raw string
		if err := rows.Scan(&raw); err != nil {
			return nil, err
		}
		out = append(out, raw)
	}
	return out, rows.Err()
}
