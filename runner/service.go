// Package runner owns runs: one per firing episode of an alert, stored beside a
// durable River queue (SQLite by default, PostgreSQL for several replicas),
// executed with deadlines, leased with a heartbeat on the run row, resumed after
// a crash from the last persisted step, cancelled through a flag on the row.
package runner

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/alertmanager/template"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/artifacts"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/runner/grouping"
	"github.com/autocapture/autocapture/runner/outbox"
	"github.com/autocapture/autocapture/runner/profiling"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// Planner turns an alert into plans (playbook matching) and rebuilds a stored
// plan for a resumed run, whatever the playbook set looks like now.
type Planner interface {
	Plan(alert template.Alert, w vocab.Window) ([]*playbooks.Plan, error)
	Rebuild(p playbooks.StoredPlan, alert template.Alert, w vocab.Window) (*playbooks.Plan, error)
}

// The playbook sets the daemon plans with: a loaded set, and the reloader
// that swaps sets on an edit.
var (
	_ Planner = (*playbooks.Set)(nil)
	_ Planner = (*playbooks.Reloader)(nil)
)

// Options configure a Service.
type Options struct {
	Config config.Runs
	// Retention deletes old finished runs (zero: runs are kept for ever).
	Retention config.Retention
	// Profiling is tier 3's fleet budget and sweeper (the plane of package
	// profiling); zero fields take config.Default's.
	Profiling config.Profiling
	// DatabaseURL is postgres://…; empty means SQLite at SQLitePath.
	DatabaseURL string
	// DatabaseWait is how long Open and Start wait for PostgreSQL to come
	// back when it is away during the start (database.startup_wait); 0
	// does not wait.
	DatabaseWait time.Duration
	SQLitePath   string
	Planner      Planner
	// Notifiers are where threads go, by a name stored with each thread
	// operation ("console", "slack"): rename one and its pending operations
	// wait for a notifier of the old name. None: no thread is recorded.
	Notifiers map[string]notify.Notifier
	// Storm groups runs into shared threads (notify.storm; runner/grouping);
	// the zero value means config.Default's.
	Storm config.Storm
	// ChannelLabel is the alert label that routes a thread to another
	// channel (notify.slack.channel_label; grouping's Channel); "" none.
	ChannelLabel string
	// Env is what steps may reach (storage, Prometheus, targets); built by serve.
	Env *vocab.Env
	// Spool is Env.Store's local spool (storage.Spool, with an S3 store);
	// nil: no late uploads. See runner/artifacts' upload.go.
	Spool artifacts.Spool
	Log   *zap.Logger
	// Registerer receives the runner's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Links says how threads link artifacts; the zero value: signed links
	// to the /artifacts route, but none without a BaseURL.
	Links artifacts.ThreadLinks
	// wrapStores, in tests, wraps the store and the heartbeat pool before
	// anything uses them (the seam that makes a Service behave as a crashed
	// process: see store), so the profiling plane goes through them too.
	wrapStores func(db, beat store) (store, store)
	// uploadBackoff, in tests, is the first wait after a failed late upload
	// (0: artifacts' default).
	uploadBackoff time.Duration
}

// Service accepts alerts into runs and executes them.
type Service struct {
	o   Options
	cfg config.Runs
	db  store // *sql.DB; tests wrap it (see store)
	// beat is the heartbeat's own pool on the same database: lease renewals
	// only (database.OpenBeat). Tests wrap it with db.
	beat    store
	dialect dialect
	tables  database.Tables // our statements, for dialect
	client  *river.Client[*sql.Tx]
	startup *startup // the start's retries of PostgreSQL (dbwait.go)
	log     *zap.Logger
	id      string // this process's lease owner id: runs.replica/pid/random (replicaOf)
	m       *metrics
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
	// The lease renewer (lease.go) outlives Stop's grace: Close ends it.
	stopRenew context.CancelFunc
	renewDone sync.WaitGroup
	started   atomic.Bool
	stopping  atomic.Bool
}

// Open migrates the store and builds the River client; Start begins work.
func Open(ctx context.Context, o Options) (*Service, error) {
	if o.Planner == nil {
		return nil, fmt.Errorf("runner: no planner")
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	o.Config = o.Config.Filled()
	db, d, drv, err := database.Open(o.DatabaseURL, o.SQLitePath)
	if err != nil {
		return nil, err
	}
	st := newStartup(d, o.DatabaseWait, o.Log.Named("runner"))
	if err := prepareStore(ctx, st, db, d, drv); err != nil {
		db.Close()
		return nil, err
	}
	beat, err := database.OpenBeat(o.DatabaseURL, o.SQLitePath)
	if err != nil {
		db.Close()
		return nil, err
	}
	closeBoth := func(err error) error { db.Close(); beat.Close(); return err }
	var sdb, sbeat store = db, beat
	if o.wrapStores != nil {
		sdb, sbeat = o.wrapStores(sdb, sbeat)
	}
	s := &Service{o: o, cfg: o.Config, db: sdb, beat: sbeat, dialect: d, tables: database.NewTables(d), startup: st, log: o.Log.Named("runner"),
		id: fmt.Sprintf("%s/%d/%s", artifacts.ReplicaName(o.Config.Replica), os.Getpid(), uuid.NewString()[:8]), active: map[string]*handle{}}
	s.out = outbox.New(outbox.Config{Sinks: o.Notifiers, Tables: s.tables,
		Store: func() outbox.Store { return s.db }, Beat: func() outbox.Store { return s.beat },
		Client: func() *river.Client[*sql.Tx] { return s.client }, Content: threadSource{s},
		LeaseTimeout: s.cfg.LeaseTimeout, HeartbeatInterval: s.cfg.HeartbeatInterval,
		RenewTimeout: s.renewTimeout, BeatReady: s.beatReady, Log: s.log})
	s.bg, s.stopBG = context.WithCancel(context.Background())
	s.art = artifacts.New(artifacts.Deps{Store: func() artifacts.Store { return s.db }, Tables: s.tables,
		Client: func() *river.Client[*sql.Tx] { return s.client }, Env: o.Env, Spool: o.Spool,
		Replica: o.Config.Replica, Owner: s.id, MaxArtifactBytes: s.cfg.MaxArtifactBytes, Retention: o.Retention,
		Unfinished: [2]string{StatusQueued, StatusRunning}, UploadBackoff: o.uploadBackoff, Links: o.Links, Now: o.Now,
		Runs: keeperRuns{s}, Log: s.log})
	if err := s.art.OpenSigner(ctx, s.startup.do); err != nil {
		return nil, closeBoth(err)
	}
	if s.client, err = s.newRiver(drv); err != nil {
		return nil, closeBoth(err)
	}
	var targets *http.Client
	if o.Env != nil {
		targets = o.Env.Targets
	}
	if s.prof, err = profiling.New(profiling.Deps{DB: s.db, Beat: s.beat, Tables: s.tables, Dialect: d, Owner: s.id,
		Log: s.log, Registerer: o.Registerer, Config: o.Profiling, Targets: targets, Runs: planeRuns{s}}); err != nil {
		return nil, closeBoth(err)
	}
	if s.grp, err = grouping.New(grouping.Deps{DB: s.db, Tables: s.tables, Outbox: s.out, Runs: groupRuns{s},
		Planner: o.Planner, Lookback: s.cfg.Lookback, Storm: o.Storm, ChannelLabel: o.ChannelLabel, Owner: s.id,
		Log: s.log, Registerer: o.Registerer}); err != nil {
		return nil, closeBoth(err)
	}
	if s.m, err = newMetrics(s, o.Registerer); err != nil {
		return nil, closeBoth(err)
	}
	s.art.HookSpool()
	return s, nil
}

// Start starts River's workers and this process's reaper. Stop ends them;
// cancelling ctx does not (a signal context must not cut running steps short).
func (s *Service) Start(ctx context.Context) error {
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

// Stop stops taking work, lets running steps end within runs.shutdown_grace,
// then interrupts the rest and releases their leases: they resume after a
// restart (or at once on another replica) and say they were resumed.
func (s *Service) Stop(ctx context.Context) error {
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

// Close stops the Service if Stop was not called (waiting up to
// runs.shutdown_grace for running steps) and releases the database.
func (s *Service) Close() error {
	if s.started.Load() && !s.stopping.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownGrace+10*time.Second)
		err := s.Stop(ctx)
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
	return errors.Join(s.db.Close(), s.beat.Close())
}

// Ping says whether the run store answers (for /-/ready).
func (s *Service) Ping(ctx context.Context) error {
	if _, err := database.Recorded(ctx, s.db); err != nil {
		return fmt.Errorf("runner: store: %w", err)
	}
	return nil
}

func (s *Service) stopBGWork() {
	s.stopBG()
	s.prof.Stop()
	s.art.Stop()
	s.bgDone.Wait()
}

// Profiling is the profiling control plane: the guard over framed profiles
// (for Env.Profiles) and the operators' kill switches (for the API's
// profiling routes).
func (s *Service) Profiling() *profiling.Plane { return s.prof }

// planeRuns answers the profiling plane's one question of the run store
// (profiling.Runs).
type planeRuns struct{ s *Service }

// CheckRun is nil when the run exists, runs.ErrNotFound when it does not.
func (r planeRuns) CheckRun(ctx context.Context, runID string) error {
	_, err := r.s.getRow(ctx, r.s.db, runID)
	return err
}

// groupRuns is what the grouper reads of the runs (grouping.Runs).
type groupRuns struct{ s *Service }

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

// interruptAll cancels every run this process executes with cause.
func (s *Service) interruptAll(cause error) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.active {
		h.cancel(cause)
	}
	return len(s.active)
}

func (s *Service) now() time.Time { return s.o.Now() }
