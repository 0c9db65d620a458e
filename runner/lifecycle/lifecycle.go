// Package lifecycle is a run's life in the run service: accepted from an
// alert with its job in one transaction (accept.go, enqueue.go), claimed by a
// worker under a lease its heartbeat renews (lease.go), executed plan by plan
// with each step recorded beside its thread reply (runexec.go, hooks.go,
// verdicts.go, runstore.go), finished, cancelled, or released and resumed by
// the reaper after its owner died (reap.go); the reads the API serves (api.go,
// feedback.go) and the gauges read from the store (metrics.go, orphans.go).
//
// The runner is its composition root: it builds Runs from Deps, the parts
// around it (the outbox, grouping, the artifacts' Keeper, the profiling
// plane), which read the runs back through Seams, and River's client over
// every part's workers, and hands those to Runs (Attach).
package lifecycle

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/alertmanager/template"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/actions"
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

// Deps are what Runs are built from.
type Deps struct {
	// Config is runs.*, its defaults filled in (config.Runs.Filled).
	Config  config.Runs
	Planner Planner
	// Now is the clock (steps' deadlines, the watchdogs); leases compare the
	// database's.
	Now func() time.Time
	// DB is the run store; Beat, a pool of its own on the same database, is
	// the heartbeat's: lease renewals only (database.OpenBeat).
	DB, Beat Store
	Dialect  database.Dialect
	// Owner is this process's lease owner id (runs.replica/pid/random).
	Owner string
	// Retry runs a step of the start again while PostgreSQL is away
	// (database.startup_wait): River's start.
	Retry func(ctx context.Context, step string, f func(context.Context) error) error
	Log   *zap.Logger
	// Registerer receives the runs' metrics at Attach; nil registers none.
	Registerer prometheus.Registerer
}

// Outbox is where the runs' thread operations are recorded, in the
// lifecycle's transactions, and whose waiting threads are swept
// (*outbox.Outbox).
type Outbox interface {
	Append(ctx context.Context, tx *sql.Tx, runID string, ops ...outbox.Op) error
	AppendResolved(ctx context.Context, tx *sql.Tx, ids []string) error
	Claimed(ctx context.Context, tx *sql.Tx, runID string, n int, owner string) error
	// RenewBeside renews the threads this process delivers, beside the runs'
	// leases; done counts the renewal's goroutine.
	RenewBeside(ctx context.Context, done *sync.WaitGroup)
	Sweep(ctx context.Context) (int, error)
	// Sinks are the notifiers' names.
	Sinks() []string
}

// Grouper decides, inside the lifecycle's transactions, who shares a thread,
// a cooldown or a playbook's slots (*grouping.Grouper).
type Grouper interface {
	Assign(ctx context.Context, tx *sql.Tx, alerts []template.Alert, created map[int]string, now time.Time) error
	Admit(ctx context.Context, tx *sql.Tx, runID string, fired time.Time, p *playbooks.Plan) (why string, err error)
	TakeSlots(ctx context.Context, tx *sql.Tx, runID string, plans []*playbooks.Plan) error
	ReleaseStep(ctx context.Context, q database.Querier, key, runID string) error
	StepCooldown(ctx context.Context, runID string, st *playbooks.PlannedStep) string
	CountRepeats(playbooks []string)
	Channel(a template.Alert, plans []*playbooks.Plan) string
	ShownGroup(ctx context.Context, lead string) (*notify.Group, error)
	MemberReport(ctx context.Context, runID, key string, retry bool) (notify.StepReport, error)
}

// Keeper keeps the runs' artifacts: the byte cap, manifests, late uploads,
// the threads' links (*artifacts.Keeper).
type Keeper interface {
	RunEnv(runID string, recorded map[string]map[string]executor.StepRecord) *vocab.Env
	EnqueueManifestTx(ctx context.Context, tx *sql.Tx, runID string) error
	SweepManifests(ctx context.Context, leaseTimeout time.Duration) (int, error)
	LoadUploads(ctx context.Context, q database.RowsQuerier, runID string) ([]runs.Upload, error)
	Link(ctx context.Context, runID string, a vocab.Artifact) (notify.Link, bool)
	Pending(ctx context.Context, key string) bool
	UploadsReply(ctx context.Context, runID, key string, retry bool) (notify.StepReport, error)
}

// Plane is tier 3's control plane as the runs see it: it counts a recorded
// profile step (*profiling.Plane).
type Plane interface {
	CountStep(rec executor.StepRecord)
}

// Loop is a part's own background work (the profile sweeper, the spool
// scans): started after River's client, ended before the runs' grace.
type Loop interface {
	Start()
	Stop()
}

var (
	_ Outbox  = (*outbox.Outbox)(nil)
	_ Grouper = (*grouping.Grouper)(nil)
	_ Keeper  = (*artifacts.Keeper)(nil)
	_ Plane   = (*profiling.Plane)(nil)
	_ Loop    = (*profiling.Plane)(nil)
	_ Loop    = (*artifacts.Keeper)(nil)
)

// Parts are what the composition root built around the Runs: River's client
// over every part's workers, and the parts the runs record into.
type Parts struct {
	Client  *river.Client[*sql.Tx]
	Outbox  Outbox
	Grouper Grouper
	Keeper  Keeper
	Plane   Plane
	// Actions are the thread's actions (a silence from Slack); nil: off.
	Actions *actions.Actions
	// Loops are started by Start and ended by StopBackground, in this
	// order.
	Loops []Loop
}

// Runs is the run lifecycle of this process.
type Runs struct {
	cfg     config.Runs
	planner Planner
	clock   func() time.Time
	db      Store // the runner's pool; its tests wrap it (see Store)
	// beat is the heartbeat's own pool on the same database: lease renewals
	// only (database.OpenBeat). Tests wrap it with db.
	beat    Store
	dialect database.Dialect
	tables  database.Tables // our statements, for dialect
	retry   func(ctx context.Context, step string, f func(context.Context) error) error
	reg     prometheus.Registerer
	log     *zap.Logger
	id      string // this process's lease owner id
	m       *Metrics

	client *river.Client[*sql.Tx]
	// out records the runs' thread operations and delivers them to the
	// notifiers (runner/outbox).
	out Outbox
	// grp groups runs into shared threads, routes threads to channels, and
	// keeps the cooldowns and playbook slots (runner/grouping).
	grp  Grouper
	prof Plane // tier 3's leases, budget, kill switches, sweeper
	// art keeps the runs' artifacts: the byte cap, manifests, late uploads
	// through the spool, retention, the threads' links (runner/artifacts).
	art   Keeper
	loops []Loop
	act   *actions.Actions // nil: the thread's actions are off
	// profilables caches, by playbook digest, whether a playbook has a
	// profile step (the parent's "Profile again").
	profilables sync.Map

	mu     sync.Mutex
	active map[string]*handle // runs this process executes, by id

	bg     context.Context // background work: reaper, sweeper
	stopBG context.CancelFunc
	bgDone sync.WaitGroup
	// The lease renewer (lease.go) outlives Stop's grace: Close ends it.
	stopRenew context.CancelFunc
	renewDone sync.WaitGroup
	started   atomic.Bool
	stopping  atomic.Bool
}

// New builds the Runs of d; Attach hands them their parts.
func New(d Deps) *Runs {
	if d.Log == nil {
		d.Log = zap.NewNop()
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	s := &Runs{cfg: d.Config, planner: d.Planner, clock: d.Now, db: d.DB, beat: d.Beat, dialect: d.Dialect,
		tables: database.NewTables(d.Dialect), retry: d.Retry, reg: d.Registerer, log: d.Log, id: d.Owner,
		m: newMetrics(), active: map[string]*handle{}}
	s.bg, s.stopBG = context.WithCancel(context.Background())
	return s
}

// Attach hands the Runs the parts built around them, and registers the runs'
// metrics (which read the outbox's backlog): after New, before Start and
// before any alert is accepted.
func (s *Runs) Attach(p Parts) error {
	s.client, s.out, s.grp, s.art, s.prof, s.loops = p.Client, p.Outbox, p.Grouper, p.Keeper, p.Plane, p.Loops
	s.act = p.Actions
	return s.m.register(s, s.reg)
}

// Seams are the runs as the parts built around them read them, each through
// the interface its part declares.
type Seams struct {
	// Thread is what a thread shows of its runs, read at delivery.
	Thread outbox.Content
	// Keeper is what a manifest says of a run, and the end of its uploads.
	Keeper artifacts.Runs
	// Grouper is what a group's thread shows of its members.
	Grouper grouping.Runs
	// Plane is whether a run exists.
	Plane profiling.Runs
}

// Seams are the Runs' answers to the parts' questions.
func (s *Runs) Seams() Seams {
	return Seams{Thread: threadSource{s}, Keeper: keeperRuns{s}, Grouper: groupRuns{s}, Plane: planeRuns{s}}
}

// Actions are the thread's actions; nil when they are off.
func (s *Runs) Actions() *actions.Actions { return s.act }

// Owner is this process's lease owner id.
func (s *Runs) Owner() string { return s.id }

// Config is runs.* as the Runs work by it.
func (s *Runs) Config() config.Runs { return s.cfg }

// Start starts River's workers, this process's lease renewer, reaper and
// sweeper, then the parts' Loops. Stop ends them; cancelling ctx does not (a
// signal context must not cut running steps short).
func (s *Runs) Start(ctx context.Context) error {
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
	for _, l := range s.loops {
		l.Start()
	}
	s.log.Info("Runner started.", zap.String("owner", s.id), zap.String("database", string(s.dialect)),
		zap.Int("max_concurrent", s.cfg.MaxConcurrent))
	return nil
}

// Stop stops taking work (this process's reaper and sweeper, then the parts'
// Loops end), lets running steps end within runs.shutdown_grace, then
// interrupts the rest and releases their leases: they resume after a restart
// (or at once on another replica) and say they were resumed. A ctx already
// done leaves no grace.
func (s *Runs) Stop(ctx context.Context) error {
	if !s.started.Load() || !s.stopping.CompareAndSwap(false, true) {
		return nil
	}
	s.StopBackground()
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
	n := s.Interrupt(fmt.Errorf("%w: shutdown grace %s passed", executor.ErrInterrupted, s.cfg.ShutdownGrace))
	s.log.Warn("Shutdown grace passed: interrupted running runs, they resume after restart.", zap.Int("runs", n))
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("runner: stop: %w", ctx.Err())
	}
}

// Close stops the runs if Stop was not called (waiting up to
// runs.shutdown_grace for running steps), then ends the background work and
// the lease renewer.
func (s *Runs) Close() {
	if s.started.Load() && !s.stopping.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownGrace+10*time.Second)
		err := s.Stop(ctx)
		cancel()
		if err != nil {
			s.log.Warn("Stopping the runner on close failed.", zap.Error(err))
		}
	}
	s.StopBackground()
	if s.stopRenew != nil {
		s.stopRenew()
		s.renewDone.Wait()
	}
}

// StopBackground ends this process's background work (the reaper, the
// sweeper, then the parts' Loops) and waits for it; the lease renewer goes on
// (Close ends it). Stop begins with it; a test's crash calls it alone.
func (s *Runs) StopBackground() {
	s.stopBG()
	for _, l := range s.loops {
		l.Stop()
	}
	s.bgDone.Wait()
}

// Interrupt cancels every run this process executes with cause and says how
// many: each is released (its lease ends now) and resumes, here after a
// restart or at once on another replica. Stop calls it when the grace has
// passed.
func (s *Runs) Interrupt(cause error) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.active {
		h.cancel(cause)
	}
	return len(s.active)
}

func (s *Runs) now() time.Time { return s.clock() }

// planeRuns answers the profiling plane's one question of the run store
// (profiling.Runs).
type planeRuns struct{ s *Runs }

// CheckRun is nil when the run exists, runs.ErrNotFound when it does not.
func (r planeRuns) CheckRun(ctx context.Context, runID string) error {
	_, err := r.s.getRow(ctx, r.s.db, runID)
	return err
}

// groupRuns is what the grouper reads of the runs (grouping.Runs).
type groupRuns struct{ s *Runs }

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
