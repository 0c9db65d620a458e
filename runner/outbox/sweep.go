package outbox

import (
	"context"
	"fmt"

	"github.com/riverqueue/river"
)

// sweepAfterMS is how old a pending thread operation of a free thread must
// be before the sweeper gives it a new delivery job: its own job normally
// delivers it in well under a second.
const sweepAfterMS = 3000

// Sweep gives a new delivery job to every thread whose operations wait
// with nobody delivering them: their job's deliverer died (its lease lapsed:
// at once, so the thread moves within lease_timeout + heartbeat_interval),
// River gave up on the job after its retries (a notifier down for long), or
// the job found the thread held by a deliverer that finished before reading
// the new operation (a free thread, once an operation waited sweepAfterMS).
// It runs on the reaper's tick on every replica.
//
// In the commit that enqueues the job it takes the thread from the lapsed
// deliverer (no owner, so the new job takes it at once) for one lease: the
// next tick, here or on another replica, leaves the thread to that job
// unless it has not delivered within the lease. Without that, every tick on
// every replica would enqueue one more job per waiting thread, multiplying
// the notify queue's work through a Slack outage.
func (s *Outbox) Sweep(ctx context.Context) (int, error) {
	if len(s.sinkOrder) == 0 {
		return 0, nil
	}
	cands, err := s.waitingThreads(ctx)
	if err != nil || len(cands) == 0 {
		return 0, err
	}
	tx, err := s.db().BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("runner: outbox sweep: %w", err)
	}
	defer tx.Rollback()
	var jobs []river.InsertManyParams
	for _, a := range cands {
		reserved, err := s.tables.Threads.ReservePump(ctx, tx, a.RunID, a.Sink, s.cfg.LeaseTimeout.Milliseconds())
		if err != nil {
			return 0, fmt.Errorf("runner: outbox sweep: %w", err)
		}
		if reserved { // else taken since the read
			jobs = append(jobs, river.InsertManyParams{Args: a})
		}
	}
	if len(jobs) == 0 {
		return 0, nil
	}
	if _, err := s.client().InsertManyTx(ctx, tx, jobs); err != nil {
		return 0, fmt.Errorf("runner: outbox sweep: enqueue: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("runner: outbox sweep: %w", err)
	}
	return len(jobs), nil
}

// waitingThreads lists up to 100 threads (of a sink this process has) with
// operations waiting and nobody delivering them (see Sweep).
func (s *Outbox) waitingThreads(ctx context.Context) ([]Args, error) {
	threads, err := s.tables.Outbox.Waiting(ctx, s.db(), sweepAfterMS)
	if err != nil {
		return nil, fmt.Errorf("runner: outbox sweep: %w", err)
	}
	var out []Args
	for _, t := range threads {
		if _, ok := s.sinks[t.Sink]; ok {
			out = append(out, Args{RunID: t.RunID, Sink: t.Sink})
		}
	}
	return out, nil
}
