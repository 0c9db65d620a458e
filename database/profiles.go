package database

import (
	"context"
	"database/sql"
	"errors"
)

// ProfileEvents is autocapture_profile_events: each profile lease's audit
// trail, numbered per run (seq), shown on its run.
type ProfileEvents struct{ d Dialect }

// ProfileEvent is one event of a run's trail.
type ProfileEvent struct {
	Target               string
	At                   int64 // Unix ms, the database's clock
	Actor, Event, Detail string
}

// Add appends an event to run runID's trail, numbered after its last, at
// the database's clock.
func (e ProfileEvents) Add(ctx context.Context, q Querier, runID, target, actor, event, detail string) error {
	_, err := q.ExecContext(ctx, e.d.SQL(`INSERT INTO autocapture_profile_events (run_id, seq, target, at, actor, event, detail)
		SELECT CAST($1 AS TEXT), COALESCE(MAX(seq), 0) + 1, CAST($2 AS TEXT), {now}, CAST($3 AS TEXT), CAST($4 AS TEXT), CAST($5 AS TEXT)
		FROM autocapture_profile_events WHERE run_id = $1`), runID, target, actor, event, detail)
	return err
}

// List returns run runID's trail in order.
func (ProfileEvents) List(ctx context.Context, q RowsQuerier, runID string) ([]ProfileEvent, error) {
	rows, err := q.QueryContext(ctx, `SELECT target, at, actor, event, detail FROM autocapture_profile_events
		WHERE run_id = $1 ORDER BY seq`, runID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ProfileEvent
	for rows.Next() {
		var e ProfileEvent
		if err := rows.Scan(&e.Target, &e.At, &e.Actor, &e.Event, &e.Detail); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// Stops counts run runID's "stopped" events on target, and of those the
// sweeper's (actor "sweeper …").
func (ProfileEvents) Stops(ctx context.Context, q RowQuerier, runID, target string) (swept, stopped int, err error) {
	err = q.QueryRowContext(ctx, `SELECT COALESCE(SUM(CASE WHEN actor LIKE 'sweeper %' THEN 1 ELSE 0 END), 0), COUNT(*)
		FROM autocapture_profile_events WHERE run_id = $1 AND target = $2 AND event = 'stopped'`,
		runID, target).Scan(&swept, &stopped)
	return swept, stopped, err
}

// LastEnd is how run runID's last lease on target ended: the last of its
// released, cleared and not_started events (sql.ErrNoRows: none).
func (ProfileEvents) LastEnd(ctx context.Context, q RowQuerier, runID, target string) (event, actor, detail string, err error) {
	err = q.QueryRowContext(ctx, `SELECT event, actor, detail FROM autocapture_profile_events
		WHERE run_id = $1 AND target = $2 AND event IN ('released', 'cleared', 'not_started') ORDER BY seq DESC LIMIT 1`,
		runID, target).Scan(&event, &actor, &detail)
	return event, actor, detail, err
}

// SweptStop is the sweeper's last "stopped" event of run runID on target:
// who (actor "sweeper …") and when (sql.ErrNoRows: none).
func (ProfileEvents) SweptStop(ctx context.Context, q RowQuerier, runID, target string) (actor string, at int64, err error) {
	err = q.QueryRowContext(ctx, `SELECT actor, at FROM autocapture_profile_events WHERE run_id = $1 AND target = $2
		AND event = 'stopped' AND actor LIKE 'sweeper %' ORDER BY seq DESC LIMIT 1`, runID, target).Scan(&actor, &at)
	return actor, at, err
}

// ProfileStarts is autocapture_profile_starts: the captures started, for
// profiling.max_per_hour and the per-target cooldown.
type ProfileStarts struct{}

// Add records a start on target by a run's step at startedAt (Unix ms).
func (ProfileStarts) Add(ctx context.Context, q Querier, target, runID, plan, stepID string, startedAt int64) error {
	_, err := q.ExecContext(ctx, `INSERT INTO autocapture_profile_starts (target, run_id, plan, step_id, started_at)
		VALUES ($1, $2, $3, $4, $5)`, target, runID, plan, stepID, startedAt)
	return err
}

// Since counts the starts after sinceMS.
func (ProfileStarts) Since(ctx context.Context, q RowQuerier, sinceMS int64) (int, error) {
	var n int
	err := q.QueryRowContext(ctx, `SELECT COUNT(*) FROM autocapture_profile_starts WHERE started_at > $1`, sinceMS).Scan(&n)
	return n, err
}

// OldestSince is the first start after sinceMS (not Valid: none): when
// a spent hourly budget frees its next slot.
func (ProfileStarts) OldestSince(ctx context.Context, q RowQuerier, sinceMS int64) (sql.NullInt64, error) {
	var first sql.NullInt64
	err := q.QueryRowContext(ctx, `SELECT MIN(started_at) FROM autocapture_profile_starts WHERE started_at > $1`,
		sinceMS).Scan(&first)
	return first, err
}

// LastOn is target's last start (not Valid: none).
func (ProfileStarts) LastOn(ctx context.Context, q RowQuerier, target string) (sql.NullInt64, error) {
	var last sql.NullInt64
	err := q.QueryRowContext(ctx, `SELECT MAX(started_at) FROM autocapture_profile_starts WHERE target = $1`,
		target).Scan(&last)
	return last, err
}

// LastOf is the last start on target by a run's step (not Valid: none).
func (ProfileStarts) LastOf(ctx context.Context, q RowQuerier, runID, plan, stepID, target string) (sql.NullInt64, error) {
	var started sql.NullInt64
	err := q.QueryRowContext(ctx, `SELECT MAX(started_at) FROM autocapture_profile_starts
		WHERE run_id = $1 AND plan = $2 AND step_id = $3 AND target = $4`,
		runID, plan, stepID, target).Scan(&started)
	return started, err
}

// SetStall records how long the stop of a run's step's last capture on
// target kept it from serving (stall_ms), on that capture's start row.
// false: no start of that step on target is recorded.
func (ProfileStarts) SetStall(ctx context.Context, q Querier, runID, plan, stepID, target string, stallMS int64) (bool, error) {
	return affected(q.ExecContext(ctx, `UPDATE autocapture_profile_starts SET stall_ms = $1
		WHERE run_id = $2 AND plan = $3 AND step_id = $4 AND target = $5 AND started_at = (
			SELECT MAX(started_at) FROM autocapture_profile_starts WHERE run_id = $2 AND plan = $3 AND step_id = $4 AND target = $5)`,
		stallMS, runID, plan, stepID, target))
}

// LastStall is the stall of target's latest measured capture and when that
// capture started (Unix ms); ok is false when none was measured.
func (ProfileStarts) LastStall(ctx context.Context, q RowQuerier, target string) (stallMS, startedAt int64, ok bool, err error) {
	err = q.QueryRowContext(ctx, `SELECT stall_ms, started_at FROM autocapture_profile_starts
		WHERE target = $1 AND stall_ms IS NOT NULL ORDER BY started_at DESC LIMIT 1`, target).Scan(&stallMS, &startedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, false, nil
	}
	return stallMS, startedAt, err == nil, err
}

// ProfileReports is autocapture_profile_reports: capture analyses kept for
// baselines, one per report key and run.
type ProfileReports struct{ d Dialect }

// ProfileReport is a kept analysis.
type ProfileReport struct {
	Key, RunID, Target string
	Baseline           bool
	TakenAt            sql.NullInt64 // Unix ms; Put: not Valid, the database's clock now
	Report             string
}

// Baseline reads the report kept for key: the last one kept as a baseline,
// else the last one (sql.ErrNoRows: none).
func (ProfileReports) Baseline(ctx context.Context, q RowQuerier, key string) (ProfileReport, error) {
	r := ProfileReport{Key: key}
	var baseline int
	err := q.QueryRowContext(ctx, `SELECT run_id, target, baseline, taken_at, report
		FROM autocapture_profile_reports WHERE report_key = $1
		ORDER BY baseline DESC, taken_at DESC, run_id DESC LIMIT 1`, key).Scan(&r.RunID, &r.Target, &baseline, &r.TakenAt, &r.Report)
	r.Baseline = baseline == 1
	return r, err
}

// Put keeps r; the same run's report for the same key is replaced.
func (p ProfileReports) Put(ctx context.Context, q Querier, r ProfileReport) error {
	baseline := 0
	if r.Baseline {
		baseline = 1
	}
	_, err := q.ExecContext(ctx, p.d.SQL(`INSERT INTO autocapture_profile_reports
		(report_key, run_id, target, baseline, taken_at, report) VALUES ($1, $2, $3, $4, COALESCE($5, {now}), $6)
		ON CONFLICT (report_key, run_id) DO UPDATE SET target = excluded.target, baseline = excluded.baseline,
		taken_at = excluded.taken_at, report = excluded.report`), r.Key, r.RunID, r.Target, baseline, r.TakenAt, r.Report)
	return err
}
