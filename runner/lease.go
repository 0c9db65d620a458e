package runner

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/runner/executor"
)

// handle is a run this process executes: its cancel function and the signal
// that its alert resolved.
type handle struct {
	id           string
	cancel       context.CancelCauseFunc
	resolved     chan struct{}
	resolvedOnce sync.Once
	started      time.Time // the run's first start, on the real clock
	from         string    // the owner the reaper took the run from (runArgs.From)
}

func (h *handle) resolve() { h.resolvedOnce.Do(func() { close(h.resolved) }) }

// work is one River job: claim the run, execute it under a heartbeat, finish or
// release it. It returns an error only when the store failed (River retries).
func (s *Service) work(ctx context.Context, args runArgs) error {
	started, ok, err := s.claim(ctx, args)
	if err != nil {
		return err
	}
	if !ok {
		s.log.Debug("Job for a run that is finished, owned or superseded: nothing to do.",
			zap.String("run", args.RunID), zap.Int("generation", args.Generation))
		return nil
	}
	runCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	h := &handle{id: args.RunID, cancel: cancel, resolved: make(chan struct{}), started: started, from: args.From}
	s.mu.Lock()
	s.active[h.id] = h
	s.mu.Unlock()
	s.runs.Add(1)
	defer func() {
		s.mu.Lock()
		delete(s.active, h.id)
		s.mu.Unlock()
		s.runs.Done()
	}()
	s.m.executing.Inc()
	defer s.m.executing.Dec()
	hbDone := make(chan struct{})
	hbCtx, stopHB := context.WithCancel(runCtx)
	go func() { defer close(hbDone); s.heartbeat(hbCtx, h) }()
	err = s.execute(runCtx, h)
	stopHB()
	<-hbDone
	return err
}

// qClaim takes a run (see claim) and answers how long ago it first started,
// on the database's clock.
const qClaim = `UPDATE autocapture_runs SET owner = $1, lease_until = {now} + $2,
		attempts = attempts + 1, status = $3, started_at = COALESCE(started_at, {now})
		WHERE id = $4 AND generation = $5 AND finished_at IS NULL AND owner IS NULL
		RETURNING {now} - started_at`

// claim takes the run for this process: only a run nobody holds (owner NULL),
// not finished, whose generation is this job's. It counts an attempt, and
// returns when the run first started on the real clock (executor.Input.Started:
// the playbook's timeout counts from it, across attempts, as a deadline). The
// elapsed time is the database's, so a replica whose clock is off neither
// gains nor loses the difference.
func (s *Service) claim(ctx context.Context, args runArgs) (time.Time, bool, error) {
	var elapsed int64
	err := s.db.QueryRowContext(ctx, s.dialect.sql(qClaim), s.id, s.cfg.LeaseTimeout.Milliseconds(),
		StatusRunning, args.RunID, args.Generation).Scan(&elapsed)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("runner: claim run %s: %w", args.RunID, err)
	}
	return time.Now().Add(-time.Duration(elapsed) * time.Millisecond), true, nil
}

// heartbeat renews the lease every heartbeat_interval and reads the row's flags:
// a cancel request cancels the run, a resolution cancels tier 3, a lost lease
// (or one this process could not renew in time) interrupts it.
//
// A watchdog, independent of the store, interrupts the run once the last
// renewal is older than lease_timeout - heartbeat_interval: a renewal that hangs
// (a stalled connection, SQLite's one connection held elsewhere) must not let
// this process go on working while another one takes the run over.
func (s *Service) heartbeat(ctx context.Context, h *handle) {
	t := time.NewTicker(s.cfg.HeartbeatInterval)
	defer t.Stop()
	margin := s.cfg.LeaseTimeout - s.cfg.HeartbeatInterval
	watchdog := time.AfterFunc(margin, func() {
		s.log.Warn("Could not renew a run's lease in time; stopping work on it.", zap.String("run", h.id))
		h.cancel(fmt.Errorf("%w: lease not renewed within %s", executor.ErrInterrupted, margin))
	})
	defer watchdog.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := s.now()
		var cancelReq, resolved sql.NullInt64
		rctx, cancel := context.WithTimeout(ctx, s.cfg.HeartbeatInterval)
		err := s.db.QueryRowContext(rctx, s.dialect.sql(`UPDATE autocapture_runs SET lease_until = {now} + $1
			WHERE id = $2 AND owner = $3 RETURNING cancel_requested_at, resolved_at`),
			s.cfg.LeaseTimeout.Milliseconds(), h.id, s.id).Scan(&cancelReq, &resolved)
		cancel()
		switch {
		case errors.Is(err, sql.ErrNoRows):
			s.log.Warn("Lost the lease on a run; stopping work on it.", zap.String("run", h.id))
			h.cancel(fmt.Errorf("%w: lease lost", executor.ErrInterrupted))
			return
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("Could not renew a run's lease.", zap.String("run", h.id), zap.Error(err))
			continue // the watchdog decides when it is too late
		}
		// The lease now runs to lease_timeout after the database received the
		// renewal, no earlier than lease_timeout after now: stop work before
		// it can lapse (durations on this clock, never its absolute time).
		watchdog.Reset(margin - s.now().Sub(now))
		if resolved.Valid {
			h.resolve()
		}
		if cancelReq.Valid {
			h.cancel(executor.ErrCancelled)
		}
	}
}

// release gives the run up after an interruption or a store failure: the lease
// expires now, so a reaper (here after restart, or on another replica) resumes it
// at once. A shutdown or lost lease does not use up one of the run's attempts.
func (s *Service) release(h *handle, cause error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // the run's context is done
	defer cancel()
	// Only an interruption (shutdown, a lost lease) gives the attempt back; a
	// store failure uses it up, so a run that keeps failing ends failed.
	// A step that could not be recorded is a store failure too.
	q := `UPDATE autocapture_runs SET lease_until = 0 WHERE id = $1 AND owner = $2 AND finished_at IS NULL`
	if errors.Is(cause, executor.ErrInterrupted) && !errors.Is(cause, executor.ErrNotRecorded) {
		q = `UPDATE autocapture_runs SET lease_until = 0,
		attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END
		WHERE id = $1 AND owner = $2 AND finished_at IS NULL`
	}
	_, err := s.db.ExecContext(ctx, q, h.id, s.id)
	if err != nil {
		s.log.Error("Could not release an interrupted run; it resumes when its lease expires.",
			zap.String("run", h.id), zap.Error(err))
		return
	}
	s.log.Info("Released an interrupted run for resumption.", zap.String("run", h.id), zap.NamedError("cause", cause))
}
