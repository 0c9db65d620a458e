package runner

import (
	"context"
	"fmt"
	"time"

	"github.com/riverqueue/river"
)

// sweepAfterMS is how old a pending thread operation of a free thread must
// be before the sweeper gives it a new delivery job: its own job normally
// delivers it in well under a second.
const sweepAfterMS = 3000

// sweepOutbox gives a new delivery job to every thread whose operations wait
// with nobody delivering them: their job's deliverer died (its lease lapsed:
// at once, so the thread moves within lease_timeout + heartbeat_interval),
// River gave up on the job after its retries (a notifier down for long), or
// the job found the thread held by a deliverer that finished before reading
// the new operation (a free thread, once an operation waited sweepAfterMS).
// It runs on the reaper's tick on every replica; a duplicate job finds the
// thread held, or nothing pending, and ends.
func (s *Service) sweepOutbox(ctx context.Context) (int, error) {
	if len(s.sinkOrder) == 0 {
		return 0, nil
	}
	rows, err := s.db.QueryContext(ctx, s.dialect.sql(`SELECT DISTINCT o.run_id, o.sink FROM autocapture_outbox o
		JOIN autocapture_threads t ON t.run_id = o.run_id AND t.sink = o.sink
		WHERE o.delivered_at IS NULL
		AND (t.pump_until < {now} OR (t.pump_until IS NULL AND o.created_at < {now} - $1)) LIMIT 100`), sweepAfterMS)
	if err != nil {
		return 0, fmt.Errorf("runner: outbox sweep: %w", err)
	}
	var jobs []river.InsertManyParams
	for rows.Next() {
		var a notifyArgs
		if err := rows.Scan(&a.RunID, &a.Sink); err != nil {
			rows.Close()
			return 0, fmt.Errorf("runner: outbox sweep: %w", err)
		}
		if _, ok := s.sinks[a.Sink]; ok {
			jobs = append(jobs, river.InsertManyParams{Args: a})
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("runner: outbox sweep: %w", err)
	}
	if len(jobs) == 0 {
		return 0, nil
	}
	if _, err := s.client.InsertMany(ctx, jobs); err != nil {
		return 0, fmt.Errorf("runner: outbox sweep: enqueue: %w", err)
	}
	return len(jobs), nil
}

// manifestStuckAfter is how long a manifest job may be running before the
// sweeper takes it for orphaned (its worker's process died mid-write) and
// asks for the manifest again; at least twice runs.lease_timeout. Writing a
// manifest is a few Stats and one small Put; River's own rescuer would wait
// an hour (RescueStuckJobsAfter, set for runs). A live but slow writer gets a
// second job beside it, which is harmless: writers follow manifest_seq and
// the last Put is of the latest state.
const manifestStuckAfter = 30 * time.Second

// sweepManifests enqueues a new manifest job for every run whose manifest
// jobs are all running since before manifestStuckAfter (and none waits to
// run): a replica killed while it wrote a manifest leaves its job running
// until River's rescuer, an hour later. It runs on the reaper's tick on every
// replica; two replicas may both enqueue one, which is harmless (see above).
func (s *Service) sweepManifests(ctx context.Context) (int, error) {
	stuck := max(manifestStuckAfter, 2*s.cfg.LeaseTimeout)
	runID := `j.args->>'run_id'`
	k2runID := `k.args->>'run_id'`
	old := `statement_timestamp() - make_interval(secs => $2)`
	var age any = stuck.Seconds()
	if s.dialect != dialectPostgres {
		runID, k2runID = `json_extract(j.args, '$.run_id')`, `json_extract(k.args, '$.run_id')`
		old = `datetime('now', 'subsec', $2)`
		age = fmt.Sprintf("-%.3f seconds", stuck.Seconds())
	}
	rows, err := s.db.QueryContext(ctx, `SELECT DISTINCT `+runID+` FROM river_job j
		WHERE j.kind = $1 AND j.state = 'running' AND j.attempted_at < `+old+` AND NOT EXISTS (
			SELECT 1 FROM river_job k WHERE k.kind = $1 AND `+k2runID+` = `+runID+`
			AND (k.state IN ('available', 'pending', 'retryable', 'scheduled') OR (k.state = 'running' AND k.attempted_at >= `+old+`)))
		LIMIT 100`, manifestArgs{}.Kind(), age)
	if err != nil {
		return 0, fmt.Errorf("runner: manifest sweep: %w", err)
	}
	var jobs []river.InsertManyParams
	for rows.Next() {
		var a manifestArgs
		if err := rows.Scan(&a.RunID); err != nil {
			rows.Close()
			return 0, fmt.Errorf("runner: manifest sweep: %w", err)
		}
		jobs = append(jobs, river.InsertManyParams{Args: a})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("runner: manifest sweep: %w", err)
	}
	if len(jobs) == 0 {
		return 0, nil
	}
	if _, err := s.client.InsertMany(ctx, jobs); err != nil {
		return 0, fmt.Errorf("runner: manifest sweep: enqueue: %w", err)
	}
	return len(jobs), nil
}
