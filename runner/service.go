// Package runner owns runs: one per firing episode of an alert, stored beside a
// durable River queue (SQLite by default, PostgreSQL for several replicas),
// executed with deadlines, leased with a heartbeat on the run row, resumed after
// a crash from the last persisted step, cancelled through a flag on the row.
//
// It is the composition root of the run service: Open opens the store and
// builds one package per job — the run lifecycle (runner/lifecycle), the
// thread outbox (runner/outbox), grouping and cooldowns (runner/grouping), the
// artifacts (runner/artifacts), the profiling control plane
// (runner/profiling) — with River's client over their workers, and connects
// their seams; the Service holds them, starts and stops them, and hands out
// what the daemon needs of them.
package runner

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/links"
	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/actions"
	"github.com/autocapture/autocapture/runner/artifacts"
	"github.com/autocapture/autocapture/runner/grouping"
	"github.com/autocapture/autocapture/runner/lifecycle"
	"github.com/autocapture/autocapture/runner/outbox"
	"github.com/autocapture/autocapture/runner/profiling"
	"github.com/autocapture/autocapture/vocab"
)

// The playbook sets the daemon plans with: a loaded set, and the reloader
// that swaps sets on an edit.
var (
	_ lifecycle.Planner = (*playbooks.Set)(nil)
	_ lifecycle.Planner = (*playbooks.Reloader)(nil)
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
	Planner      lifecycle.Planner
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
	// Actions turns the thread's actions on (a silence from Slack); nil: off.
	Actions    *ActionsOptions
	wrapStores func(db, beat store) (store, store)
	// uploadBackoff, in tests, is the first wait after a failed late upload
	// (0: artifacts' default).
	uploadBackoff time.Duration
}

// Service accepts alerts into runs and executes them: the composition root
// of the run service. It holds the parts Open built and connected, starts and
// stops them, and answers the run lifecycle's API (api.go).
type Service struct {
	life *lifecycle.Runs // accept, execute, lease, reap; the API's reads
	// client is River's over every part's workers; the lifecycle starts and
	// stops it with the runs.
	client *river.Client[*sql.Tx]
	// db and beat are the store's pools (the heartbeat's apart, see
	// database.OpenBeat), opened by Open and closed by Close; tests wrap both
	// (see store).
	db, beat store
	out      *outbox.Outbox    // the runs' thread operations and their delivery
	grp      *grouping.Grouper // shared threads, routing, cooldowns, playbook slots
	art      *artifacts.Keeper // byte cap, manifests, late uploads, retention, links
	prof     *profiling.Plane  // tier 3's leases, budget, kill switches, sweeper
}

// Open migrates the store, builds the parts and River's client and connects
// them; Start begins work.
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
	log := o.Log.Named("runner")
	db, beat, d, drv, st, err := openStore(ctx, o, log)
	if err != nil {
		return nil, err
	}
	s := &Service{db: db, beat: beat}
	if o.wrapStores != nil {
		s.db, s.beat = o.wrapStores(s.db, s.beat)
	}
	if err := s.compose(ctx, o, d, drv, st, log); err != nil {
		db.Close()
		beat.Close()
		return nil, err
	}
	return s, nil
}

// openStore opens the store's pools (the heartbeat's apart), migrated, and
// starts the start's budget of retries while PostgreSQL is away.
func openStore(ctx context.Context, o Options, log *zap.Logger) (db *sql.DB, beat database.Pool, d database.Dialect, drv riverdriver.Driver[*sql.Tx], st *startup, err error) {
	if db, d, drv, err = database.Open(o.DatabaseURL, o.SQLitePath); err != nil {
		return nil, nil, d, nil, nil, err
	}
	st = newStartup(d, o.DatabaseWait, log)
	if err := prepareStore(ctx, st, db, d, drv); err != nil {
		db.Close()
		return nil, nil, d, nil, nil, err
	}
	if beat, err = database.OpenBeat(o.DatabaseURL, o.SQLitePath); err != nil {
		db.Close()
		return nil, nil, d, nil, nil, err
	}
	return db, beat, d, drv, st, nil
}

// compose builds the parts on s's pools, River's client over their workers,
// and connects them.
func (s *Service) compose(ctx context.Context, o Options, d database.Dialect, drv riverdriver.Driver[*sql.Tx], st *startup, log *zap.Logger) error {
	owner := fmt.Sprintf("%s/%d/%s", artifacts.ReplicaName(o.Config.Replica), os.Getpid(), uuid.NewString()[:8])
	tables := database.NewTables(d)
	s.life = lifecycle.New(lifecycle.Deps{Config: o.Config, Planner: o.Planner, Now: o.Now, DB: s.db, Beat: s.beat,
		Dialect: d, Owner: owner, Retry: st.do, Log: log, Registerer: o.Registerer})
	seams := s.life.Seams()
	var act *actions.Actions // built after the outbox, which reads its replies
	client := func() *river.Client[*sql.Tx] { return s.client }
	s.out = outbox.New(outbox.Config{Sinks: o.Notifiers, Tables: tables,
		Store: func() outbox.Store { return s.db }, Beat: func() outbox.Store { return s.beat },
		Client: client, Content: seams.Thread, Actions: func() outbox.ActionContent { return actionContent(act) },
		LeaseTimeout: o.Config.LeaseTimeout, HeartbeatInterval: o.Config.HeartbeatInterval,
		RenewTimeout: s.life.RenewTimeout, BeatReady: s.life.BeatReady, Log: log})
	s.art = artifacts.New(artifacts.Deps{Store: func() artifacts.Store { return s.db }, Tables: tables,
		Client: client, Env: o.Env, Spool: o.Spool,
		Replica: o.Config.Replica, Owner: owner, MaxArtifactBytes: o.Config.MaxArtifactBytes, Retention: o.Retention,
		UploadBackoff: o.uploadBackoff, Links: o.Links, Now: o.Now,
		Runs: seams.Keeper, Log: log})
	if err := s.art.OpenSigner(ctx, st.do); err != nil {
		return err
	}
	var err error
	if s.client, err = newRiver(drv, o.Config, owner, log, s.life, s.out, s.art); err != nil {
		return err
	}
	var targets *http.Client
	if o.Env != nil {
		targets = o.Env.Targets
	}
	if s.prof, err = profiling.New(profiling.Deps{DB: s.db, Beat: s.beat, Tables: tables, Dialect: d, Owner: owner,
		Log: log, Registerer: o.Registerer, Config: o.Profiling, Targets: targets, Runs: seams.Plane}); err != nil {
		return err
	}
	if s.grp, err = grouping.New(grouping.Deps{DB: s.db, Tables: tables, Outbox: s.out, Runs: seams.Grouper,
		Planner: o.Planner, Lookback: o.Config.Lookback, Storm: o.Storm, ChannelLabel: o.ChannelLabel, Owner: owner,
		Log: log, Registerer: o.Registerer}); err != nil {
		return err
	}
	if act, err = newActions(o, d, tables, func() actions.Store { return s.db }, s.out, s.life, s.prof, s.art.Link); err != nil {
		return err
	}
	loops := []lifecycle.Loop{s.prof, s.art}
	if act != nil {
		loops = append(loops, act)
	}
	if err := s.life.Attach(lifecycle.Parts{Client: s.client, Outbox: s.out, Grouper: s.grp, Keeper: s.art, Plane: s.prof,
		Actions: act, Loops: loops}); err != nil {
		return err
	}
	if err := register(o.Registerer, append(s.art.Collectors(), s.out.Collectors()...)...); err != nil {
		return err
	}
	s.art.HookSpool()
	return nil
}

// register registers cs with reg (none when nil).
func register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	if reg == nil {
		return nil
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("runner: register metrics: %w", err)
		}
	}
	return nil
}

// Start starts River's workers, the run lifecycle's background work and the
// parts'. Stop ends them; cancelling ctx does not (a signal context must not
// cut running steps short).
func (s *Service) Start(ctx context.Context) error { return s.life.Start(ctx) }

// Stop stops taking work, lets running steps end within runs.shutdown_grace,
// then interrupts the rest and releases their leases: they resume after a
// restart (or at once on another replica) and say they were resumed.
func (s *Service) Stop(ctx context.Context) error { return s.life.Stop(ctx) }

// Close stops the Service if Stop was not called (waiting up to
// runs.shutdown_grace for running steps) and releases the database.
func (s *Service) Close() error {
	s.life.Close()
	s.prof.Close() // waits for the sweeper's stops in flight
	return errors.Join(s.db.Close(), s.beat.Close())
}

// Ping says whether the run store answers (for /-/ready).
func (s *Service) Ping(ctx context.Context) error {
	if _, err := database.Recorded(ctx, s.db); err != nil {
		return fmt.Errorf("runner: store: %w", err)
	}
	return nil
}

// Profiling is the profiling control plane: the guard over framed profiles
// (for Env.Profiles) and the operators' kill switches (for the API's
// profiling routes).
func (s *Service) Profiling() *profiling.Plane { return s.prof }

// Signer is the link signer the /artifacts route verifies tokens with.
func (s *Service) Signer() *links.Signer { return s.art.Signer() }
