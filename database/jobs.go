package database

import (
	"context"
	"fmt"
	"time"
)

// Jobs reads River's river_job table beside our runs: what River does not
// answer itself. Its args are JSON (PostgreSQL: jsonb, ->>; SQLite: text,
// json_extract), and its times River's own (PostgreSQL: timestamptz;
// SQLite: datetime text), hence a statement per dialect.
type Jobs struct{ d Dialect }

// Orphaned counts the jobs of kind (run jobs, whose args carry run_id and
// generation) left running: the job started more than lease ago (a job
// fetched moments ago has not claimed its run yet) and its run is not held
// by a live lease at the job's generation, nor finished within lease
// (River completes a job just after its run ends). Times are the database's.
func (j Jobs) Orphaned(ctx context.Context, q RowQuerier, kind string, lease time.Duration) (int, error) {
	runID, gen := `j.args->>'run_id'`, `CAST(j.args->>'generation' AS INTEGER)`
	started := `statement_timestamp() - make_interval(secs => $2)`
	var age any = lease.Seconds()
	if j.d != Postgres {
		runID, gen = `json_extract(j.args, '$.run_id')`, `CAST(json_extract(j.args, '$.generation') AS INTEGER)`
		started = `datetime('now', 'subsec', $2)`
		age = fmt.Sprintf("-%.3f seconds", lease.Seconds())
	}
	var n int
	err := q.QueryRowContext(ctx, j.d.SQL(`SELECT COUNT(*) FROM river_job j
		WHERE j.kind = $1 AND j.state = 'running' AND j.attempted_at < `+started+` AND NOT EXISTS (
			SELECT 1 FROM autocapture_runs r WHERE r.id = `+runID+` AND r.generation = `+gen+`
			AND ((r.finished_at IS NULL AND r.owner IS NOT NULL AND r.lease_until >= {now})
				OR r.finished_at >= {now} - $3))`), kind, age, lease.Milliseconds()).Scan(&n)
	return n, err
}

// Stuck lists up to 100 run ids (args run_id) whose jobs of kind are all
// running since before stuck ago, with none waiting to run.
func (j Jobs) Stuck(ctx context.Context, q RowsQuerier, kind string, stuck time.Duration) ([]string, error) {
	runID := `j.args->>'run_id'`
	k2runID := `k.args->>'run_id'`
	old := `statement_timestamp() - make_interval(secs => $2)`
	var age any = stuck.Seconds()
	if j.d != Postgres {
		runID, k2runID = `json_extract(j.args, '$.run_id')`, `json_extract(k.args, '$.run_id')`
		old = `datetime('now', 'subsec', $2)`
		age = fmt.Sprintf("-%.3f seconds", stuck.Seconds())
	}
	return records(ctx, q, `SELECT DISTINCT `+runID+` FROM river_job j
		WHERE j.kind = $1 AND j.state = 'running' AND j.attempted_at < `+old+` AND NOT EXISTS (
			SELECT 1 FROM river_job k WHERE k.kind = $1 AND `+k2runID+` = `+runID+`
			AND (k.state IN ('available', 'pending', 'retryable', 'scheduled') OR (k.state = 'running' AND k.attempted_at >= `+old+`)))
		LIMIT 100`, kind, age)
}
