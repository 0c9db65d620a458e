package runner

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/runner/artifacts"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/runner/grouping"
	"github.com/autocapture/autocapture/runner/outbox"
	"github.com/autocapture/autocapture/runner/profiling"
	"github.com/autocapture/autocapture/runner/runs"
)

// lifecycle is a run's life in this process: accepted with its job (accept.go,
// enqueue.go), claimed under a lease its heartbeat renews (lease.go), executed
// plan by plan with each step recorded beside its thread reply (runexec.go,
// hooks.go, verdicts.go, runstore.go), finished, cancelled, or released and
// resumed by the reaper (reap.go); the reads the API serves (api.go,
// feedback.go) and the gauges read from the store (metrics.go, orphans.go).
// It works through the parts the Service composed around it (the outbox, the
// grouper, the artifacts' Keeper, the profiling plane), which read the runs
// back through its seams (threadSource, keeperRuns, groupRuns, planeRuns).
type lifecycle struct {
	cfg     config.Runs
	planner Planner
	clock   func() time.Time
	db      store // *sql.DB; tests wrap it (see store)
	// beat is the heartbeat's own pool on the same database: lease renewals
	// only (database.OpenBeat). Tests wrap it with db.
	beat    store
	dialect dialect
	tables  database.Tables // our statements, for dialect
	client  *river.Client[*sql.Tx]
	// retry runs a step of the start again while PostgreSQL is away
	// (startup.do, dbwait.go): River's start.
	retry func(ctx context.Context, step string, f func(context.Context) error) error
	log   *zap.Logger
	id    string // this process's lease owner id: runs.replica/pid/random (replicaOf)
	m     *metrics
	// out records the runs' thread operations and delivers them to the
	// notifiers (runner/outbox).
	out *outbox.Outbox
	// grp groups runs into shared threads, routes threads to channels, and
	// keeps the cooldowns and playbook slots (runner/grouping).
	grp  *grouping.Grouper
	prof *profiling.Plane // tier 3's leases, budget, kill switches, sweeper
	// art keeps the runs' artifacts: the byte cap, manifests, late uploads
	// through the spool, retention, the threads' links (runner/artifacts).
	art *artifacts.Keeper

	mu     sync.Mutex
	active map[string]*handle // runs this process executes, by id
	runs   sync.WaitGroup     // their goroutines

	bg     context.Context // background work: reaper, heartbeats
	stopBG context.CancelFunc
	bgDone sync.WaitGroup
	// The lease renewer (lease.go) outlives Stop's grace: close ends it.
	stopRenew context.CancelFunc
	renewDone sync.WaitGroup
	started   atomic.Bool
	stopping  atomic.Bool
}

// start starts River's workers, this process's lease renewer, reaper and
// sweeper, and the parts' own background work (the profile sweeper, the
// spool scans).
func (s *lifecycle) start(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return fmt.Errorf("runner: already started")
	}
	if err := s.startRiver(ctx); err != nil {
		return err
	}
	renewCtx, stopRenew := context.WithCancel(context.Background())
	s.stopRenew = stopRenew
	s.renewDone.Add(1)
	go s.renewer(renewCtx)
	s.bgDone.Add(2)
	go s.reaper()
	go s.outboxSweeper()
	s.prof.Start()
	s.art.Start()
	s.log.Info("Runner started.", zap.String("owner", s.id), zap.String("database", string(s.dialect)),
		zap.Int("max_concurrent", s.cfg.MaxConcurrent))
	return nil
}

// stop stops taking work, lets running steps end within runs.shutdown_grace,
// then interrupts the rest and releases their leases: they resume after a
// restart (or at once on another replica) and say they were resumed.
func (s *lifecycle) stop(ctx context.Context) error {
	if !s.started.Load() || !s.stopping.CompareAndSwap(false, true) {
		return nil
	}
	s.stopBGWork()
	done := make(chan error, 1)
	go func() { done <- s.client.Stop(context.WithoutCancel(ctx)) }()
	grace := time.NewTimer(s.cfg.ShutdownGrace)
	defer grace.Stop()
	select {
	case err := <-done:
		return err
	case <-grace.C:
	case <-ctx.Done():
	}
	n := s.interruptAll(fmt.Errorf("%w: shutdown grace %s passed", executor.ErrInterrupted, s.cfg.ShutdownGrace))
	s.log.Warn("Shutdown grace passed: interrupted running runs, they resume after restart.", zap.Int("runs", n))
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("runner: stop: %w", ctx.Err())
	}
}

// close stops the runs if stop was not called (waiting up to
// runs.shutdown_grace for running steps), then ends the background work and
// the lease renewer.
func (s *lifecycle) close() {
	if s.started.Load() && !s.stopping.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownGrace+10*time.Second)
		err := s.stop(ctx)
		cancel()
		if err != nil {
			s.log.Warn("Stopping the runner on close failed.", zap.Error(err))
		}
	}
	s.stopBGWork()
	if s.stopRenew != nil {
		s.stopRenew()
		s.renewDone.Wait()
	}
	s.prof.Close()
}

func (s *lifecycle) stopBGWork() {
	s.stopBG()
	s.prof.Stop()
	s.art.Stop()
	s.bgDone.Wait()
}

// interruptAll cancels every run this process executes with cause.
func (s *lifecycle) interruptAll(cause error) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.active {
		h.cancel(cause)
	}
	return len(s.active)
}

func (s *lifecycle) now() time.Time { return s.clock() }

// planeRuns answers the profiling plane's one question of the run store
// (profiling.Runs).
type planeRuns struct{ s *lifecycle }

// CheckRun is nil when the run exists, runs.ErrNotFound when it does not.
func (r planeRuns) CheckRun(ctx context.Context, runID string) error {
	_, err := r.s.getRow(ctx, r.s.db, runID)
	return err
}

// groupRuns is what the grouper reads of the runs (grouping.Runs).
type groupRuns struct{ s *lifecycle }

// Run reads a run with its steps.
func (g groupRuns) Run(ctx context.Context, runID string) (*runs.Run, error) {
	r, err := g.s.getRow(ctx, g.s.db, runID)
	if err != nil {
		return nil, err
	}
	if r.Steps, err = g.s.loadSteps(ctx, g.s.db, runID); err != nil {
		return nil, err
	}
	return &r.Run, nil
}

// GroupRuns reads the runs of lead's group in the order they joined.
func (g groupRuns) GroupRuns(ctx context.Context, lead string) ([]*runs.Run, error) {
	rows, err := g.s.tables.Runs.GroupMembers(ctx, g.s.db, lead)
	if err != nil {
		return nil, err
	}
	out := make([]*runs.Run, 0, len(rows))
	for _, raw := range rows {
		r, err := decodeRun(raw)
		if err != nil {
			return nil, err
		}
		out = append(out, &r.Run)
	}
	return out, nil
}
