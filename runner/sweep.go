package runner

import (
	"context"
	"fmt"

	"github.com/riverqueue/river"
)

// sweepAfterMS is how old a pending thread operation must be before the
// sweeper gives it a new delivery job: its own job normally delivers it in
// well under a second.
const sweepAfterMS = 3000

// sweepOutbox gives a new delivery job to every thread whose operations wait
// with nobody delivering them: their job's deliverer died (its lease ran out),
// River gave up on the job after its retries (a notifier down for long), or
// the job found the thread held by a deliverer that finished before reading
// the new operation. It runs on the reaper's tick on every replica; a
// duplicate job finds the thread held, or nothing pending, and ends.
func (s *Service) sweepOutbox(ctx context.Context) (int, error) {
	if len(s.sinkOrder) == 0 {
		return 0, nil
	}
	rows, err := s.db.QueryContext(ctx, s.dialect.sql(`SELECT DISTINCT o.run_id, o.sink FROM autocapture_outbox o
		JOIN autocapture_threads t ON t.run_id = o.run_id AND t.sink = o.sink
		WHERE o.delivered_at IS NULL AND o.created_at < {now} - $1
		AND (t.pump_until IS NULL OR t.pump_until < {now}) LIMIT 100`), sweepAfterMS)
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
