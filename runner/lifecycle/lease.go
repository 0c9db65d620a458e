package lifecycle

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/vocab"
)

// handle is a run this process executes: its cancel function and the signal
// that its alert resolved.
type handle struct {
	id           string
	cancel       context.CancelCauseFunc
	resolved     chan struct{}
	resolvedOnce sync.Once
	started      time.Time // the run's first start, on the real clock
	watchdog     *time.Timer
}

func (h *handle) resolve() { h.resolvedOnce.Do(func() { close(h.resolved) }) }

// work is one River job: claim the run, execute it under a heartbeat, finish or
// release it. It returns an error only when the store failed (River retries).
func (s *Runs) work(ctx context.Context, args RunJob) error {
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
	h := &handle{id: args.RunID, cancel: cancel, resolved: make(chan struct{}), started: started}
	s.watch(h)
	defer h.watchdog.Stop()
	s.mu.Lock()
	s.active[h.id] = h
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.active, h.id)
		s.mu.Unlock()
	}()
	s.m.Executing.Inc()
	defer s.m.Executing.Dec()
	return s.execute(runCtx, h)
}

// claim takes the run for this process: only a run nobody holds (owner NULL),
// not finished, whose generation is this job's. It counts an attempt, and
// returns when the run first started on the real clock (executor.Input.Started:
// the playbook's timeout counts from it, across attempts, as a deadline). The
// elapsed time is the database's, so a replica whose clock is off neither
// gains nor loses the difference.
func (s *Runs) claim(ctx context.Context, args RunJob) (time.Time, bool, error) {
	elapsed, err := s.tables.Runs.Claim(ctx, s.db, s.id, s.cfg.LeaseTimeout.Milliseconds(),
		vocab.StatusRunning, args.RunID, args.Generation)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("runner: claim run %s: %w", args.RunID, err)
	}
	return time.Now().Add(-time.Duration(elapsed) * time.Millisecond), true, nil
}

// The heartbeat: one loop per process (renewer, started with the Runs and
// ended by Close, after Stop's grace, so runs finishing within it keep
// their leases) renews the leases of every run this process executes in one
// statement each heartbeat_interval and reads their rows' flags: a cancel
// request cancels the run, a resolution cancels tier 3, a lost lease (its row
// not renewed: another owner, or finished) interrupts it. One statement per
// interval, whatever the number of runs: a renewal per run made 30 runs
// starting together under load miss their renewals (the HA proof's 2 s lease)
// while they competed for the pool with the steps' own writes.
//
// A watchdog per run, independent of the store, interrupts it once its last
// renewal is older than lease_timeout - heartbeat_interval: a renewal that
// hangs (a stalled connection, SQLite's one connection held elsewhere) must
// not let this process go on working while another one takes the run over.

// maxRenewBatch bounds the ids of one renewal statement (SQLite allows
// 32,766 parameters; PostgreSQL 65,535).
const maxRenewBatch = 500

// watch arms run h's watchdog; the renewer resets it on each renewal.
func (s *Runs) watch(h *handle) {
	margin := s.cfg.LeaseTimeout - s.cfg.HeartbeatInterval
	h.watchdog = time.AfterFunc(margin, func() {
		s.log.Warn("Could not renew a run's lease in time; stopping work on it.", zap.String("run", h.id))
		h.cancel(fmt.Errorf("%w: lease not renewed within %s", executor.ErrInterrupted, margin))
	})
}

// RenewTimeout bounds one renewal statement: a third of the time a lease
// has left after a heartbeat (lease_timeout - heartbeat_interval), so three
// tries fit before the watchdog stops the work, and never less than a
// heartbeat: a renewal that must open a connection (after the database
// restarts) needs longer than one tick, and cancelling it mid-connect every
// tick would lose healthy runs' leases. The loop waits for a slow renewal,
// and the next tick renews whatever it missed.
func (s *Runs) RenewTimeout() time.Duration {
	return max(s.cfg.HeartbeatInterval, (s.cfg.LeaseTimeout-s.cfg.HeartbeatInterval)/3)
}

// renewer renews this process's leases every heartbeat_interval until ctx
// ends: its runs', and beside them its deliverers' threads' (one more
// statement).
func (s *Runs) renewer(ctx context.Context) {
	defer s.renewDone.Done()
	t := time.NewTicker(s.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.out.RenewBeside(ctx, &s.renewDone) // the threads this process delivers (runner/outbox)
		s.mu.Lock()
		hs := make([]*handle, 0, len(s.active))
		for _, h := range s.active {
			hs = append(hs, h)
		}
		s.mu.Unlock()
		for len(hs) > 0 {
			n := min(len(hs), maxRenewBatch)
			s.renew(ctx, hs[:n])
			hs = hs[n:]
		}
	}
}

// renew renews the leases of hs in one statement and acts on what it read.
func (s *Runs) renew(ctx context.Context, hs []*handle) {
	now := s.now()
	ids := make([]string, len(hs))
	for i, h := range hs {
		ids[i] = h.id
	}
	s.BeatReady(ctx)
	rctx, cancel := context.WithTimeout(ctx, s.RenewTimeout())
	defer cancel()
	renewed, err := s.renewRows(rctx, ids)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("Could not renew the leases of this process's runs.", zap.Int("runs", len(hs)), zap.Error(err))
		}
		return // each run's watchdog decides when it is too late
	}
	var busy map[string]bool
	if len(renewed) < len(hs) && s.dialect == database.Postgres { // SQLite skips nothing: not renewed is lost
		if busy, err = s.stillOwned(rctx, hs, renewed); err != nil {
			// Unknown whether the rest were skipped or lost: leave them to
			// their watchdogs, and keep the renewals that were made.
			if ctx.Err() == nil {
				s.log.Warn("Could not read whether the runs whose leases were not renewed are still this process's.",
					zap.Int("runs", len(hs)-len(renewed)), zap.Error(err))
			}
			busy = map[string]bool{}
			for _, h := range hs {
				if _, ok := renewed[h.id]; !ok {
					busy[h.id] = true
				}
			}
		}
	}
	margin := s.cfg.LeaseTimeout - s.cfg.HeartbeatInterval
	for _, h := range hs {
		flags, ok := renewed[h.id]
		s.mu.Lock()
		current := s.active[h.id] == h
		s.mu.Unlock()
		switch {
		case !current: // it ended while the renewal ran
			continue
		case busy[h.id]: // its row is locked by a write in flight: the next tick renews it
			continue
		case !ok:
			s.log.Warn("Lost the lease on a run; stopping work on it.", zap.String("run", h.id))
			h.cancel(fmt.Errorf("%w: lease lost", executor.ErrInterrupted))
			continue
		}
		// The lease now runs to lease_timeout after the database received
		// the renewal, no earlier than lease_timeout after now: stop work
		// before it can lapse (durations on this clock, never its absolute time).
		h.watchdog.Reset(margin - s.now().Sub(now))
		if flags.resolved {
			h.resolve()
		}
		if flags.cancel {
			h.cancel(executor.ErrCancelled)
		}
	}
}

// stillOwned reads, without waiting for locks, which of hs that the
// renewal did not renew this process still owns: their rows were locked (a
// step being recorded, a delivery's sequence number), not taken. The
// renewal skips locked rows (unlockedRuns) rather than wait for them: waiting,
// it would hold the rows it had renewed, queue those runs' writes behind it,
// and under load wait for the slowest transaction past its timeout, every
// tick, until healthy runs' watchdogs stopped them.
func (s *Runs) stillOwned(ctx context.Context, hs []*handle, renewed map[string]runFlags) (map[string]bool, error) {
	var ids []string
	for _, h := range hs {
		if _, ok := renewed[h.id]; !ok {
			ids = append(ids, h.id)
		}
	}
	return s.tables.Runs.Owned(ctx, s.beat, s.id, ids)
}

// beatReadier is a heartbeat pool that can wait for a connection to be
// ready without taking it (database.BeatPool; the embedded store's one
// connection to the file needs no wait).
type beatReadier interface {
	Ready(ctx context.Context) error
}

// BeatReady waits, up to the time the watchdogs leave a lease after a
// renewal, for the heartbeat pool to have a connection, before a renewal
// starts its statement against its own, shorter deadline: a connection the
// database is slow to accept (forking and authenticating a backend under
// load, or after a restart) is waited for once, instead of each renewal
// giving up on it and the next one starting another (pgxpool makes an
// acquirer wait for the connect it began, not for one finished meanwhile).
// A renewal that found no connection in time fails as before, and the
// watchdogs stop the work.
func (s *Runs) BeatReady(ctx context.Context) {
	r, ok := s.beat.(beatReadier)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.LeaseTimeout-s.cfg.HeartbeatInterval)
	defer cancel()
	_ = r.Ready(ctx) // the statement that follows reports what failed
}

// runFlags are a renewed run's flags.
type runFlags struct{ cancel, resolved bool }

// renewRows renews this process's leases on runs ids on the heartbeat's
// connections and returns the flags of the rows it renewed, by id.
func (s *Runs) renewRows(ctx context.Context, ids []string) (map[string]runFlags, error) {
	renewed, err := s.tables.Runs.Renew(ctx, s.beat, s.id, s.cfg.LeaseTimeout.Milliseconds(), ids)
	if err != nil {
		return nil, err
	}
	out := make(map[string]runFlags, len(renewed))
	for id, f := range renewed {
		out[id] = runFlags{cancel: f.Cancel, resolved: f.Resolved}
	}
	return out, nil
}

// release gives the run up after an interruption or a store failure: the lease
// expires now, so a reaper (here after restart, or on another replica) resumes it
// at once. A shutdown or lost lease does not use up one of the run's attempts.
func (s *Runs) release(h *handle, cause error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // the run's context is done
	defer cancel()
	// Only an interruption (shutdown, a lost lease) gives the attempt back; a
	// store failure uses it up, so a run that keeps failing ends failed.
	// A step that could not be recorded is a store failure too.
	giveBack := errors.Is(cause, executor.ErrInterrupted) && !errors.Is(cause, executor.ErrNotRecorded)
	err := s.tables.Runs.Release(ctx, s.db, h.id, s.id, giveBack)
	if err != nil {
		s.log.Error("Could not release an interrupted run; it resumes when its lease expires.",
			zap.String("run", h.id), zap.Error(err))
		return
	}
	s.log.Info("Released an interrupted run for resumption.", zap.String("run", h.id), zap.NamedError("cause", cause))
}
