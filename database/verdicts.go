package database

import (
	"context"
	"database/sql"
	"errors"
)

// Verdicts is autocapture_verdicts, a run's verdict history: records (JSON)
// keyed by run, plan, step and verdict key, numbered n in the order recorded.
type Verdicts struct{}

// Verdict is one entry to record.
type Verdict struct {
	RunID, Plan, Step, Key, Kind string
	At                           int64  // Unix ms
	Record                       string // JSON
}

// Add records v numbered after the run's last entry; false when its key was
// recorded before (nothing is written then). The caller holds the run's row
// locked (Runs.LockOwned), so the numbering cannot race another writer.
func (Verdicts) Add(ctx context.Context, q Querier, v Verdict) (bool, error) {
	res, err := q.ExecContext(ctx, `INSERT INTO autocapture_verdicts (run_id, plan, step_id, verdict_key, n, kind, at, record)
		SELECT $1, $2, $3, $4, COALESCE(MAX(n), 0) + 1, $5, CAST($6 AS BIGINT), $7 FROM autocapture_verdicts WHERE run_id = $1
		ON CONFLICT DO NOTHING`, v.RunID, v.Plan, v.Step, v.Key, v.Kind, v.At, v.Record)
	if err != nil {
		return false, err
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

// Latest is the record of the step's last entry; false without one.
func (Verdicts) Latest(ctx context.Context, q RowQuerier, runID, plan, step string) (string, bool, error) {
	var raw string
	err := q.QueryRowContext(ctx, `SELECT record FROM autocapture_verdicts WHERE run_id = $1 AND plan = $2 AND step_id = $3
		ORDER BY n DESC LIMIT 1`, runID, plan, step).Scan(&raw)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	return raw, err == nil, err
}

// Get is the record of the step's entry under key (sql.ErrNoRows: none).
func (Verdicts) Get(ctx context.Context, q RowQuerier, runID, plan, step, key string) (string, error) {
	var raw string
	err := q.QueryRowContext(ctx, `SELECT record FROM autocapture_verdicts WHERE run_id = $1 AND plan = $2
		AND step_id = $3 AND verdict_key = $4`, runID, plan, step, key).Scan(&raw)
	return raw, err
}

// List returns the run's records in the order recorded.
func (Verdicts) List(ctx context.Context, q RowsQuerier, runID string) ([]string, error) {
	return records(ctx, q, `SELECT record FROM autocapture_verdicts WHERE run_id = $1 ORDER BY n`, runID)
}
