// Package profiling is tier 3's control plane: the fleet-wide guard over
// framed profiles (vocab.ProfileGuard: one lease per target, the budget of
// profiling.max_concurrent and max_per_hour, the cooldown), the operators'
// kill switches (the pause, a stop of one run's capture, the clear of a stuck
// lease: the /api/v1/profiling routes), the sweeper that repairs what a dead
// owner left, and tier 3's metrics. Its state is the profile tables of the
// run store (package database); a Plane adds what one process holds: its live
// leases, polled for an operator's stop, and the sweeper's stops in flight.
//
// The run service (package runner) builds one Plane on its own store and
// starts and stops its background loops with its own; it does not reach into
// the Plane otherwise. What the Plane needs of the runs is one question (does
// a run exist: Runs).
package profiling

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/runner/executor"
)

// Store is what the Plane reads and writes the profile tables through: the
// run service's store (the *sql.DB in production; its tests wrap it to make a
// process behave as a crashed one, and the Plane must go through that same
// wrapper).
type Store interface {
	database.Querier
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

var _ Store = (*sql.DB)(nil)

// Runs is what the Plane needs of the run store (the run service implements
// it): CheckRun returns nil when the run exists, an error wrapping
// runs.ErrNotFound when it does not.
type Runs interface {
	CheckRun(ctx context.Context, runID string) error
}

// Deps are what a Plane is built from.
type Deps struct {
	// DB is the store the profile tables are read and written through.
	DB Store
	// Beat is the heartbeat's own pool on the same database: lease renewals.
	Beat database.Querier
	// Tables are the typed statements for the store's dialect.
	Tables  database.Tables
	Dialect database.Dialect
	// Owner is this process's lease owner id (runs.replica/pid/random).
	Owner string
	Log   *zap.Logger
	// Registerer receives tier 3's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Config is profiling's; zero fields take config.Default's (Defaults).
	Config config.Profiling
	// Targets is the HTTP client the sweeper sends its stops through
	// (Env.Targets); nil: its stops fail, saying so.
	Targets *http.Client
	Runs    Runs
}

// Plane is the profiling control plane of one process.
type Plane struct {
	db      Store
	beat    database.Querier
	tables  database.Tables
	dialect database.Dialect
	id      string // this process's lease owner id
	log     *zap.Logger
	cfg     config.Profiling // its defaults filled in (Defaults)
	targets *http.Client
	runs    Runs
	live    profileLocal   // live profile leases, sweeper stops (poll.go)
	pm      profileMetrics // tier 3's counters (metrics.go)

	bg      context.Context // background work: the sweeper, the stop polls
	stopBG  context.CancelFunc
	loops   sync.WaitGroup
	started atomic.Bool
}

// New builds a Plane and registers its metrics; Start starts its sweeper.
func New(d Deps) (*Plane, error) {
	if d.DB == nil || d.Beat == nil || d.Runs == nil {
		return nil, fmt.Errorf("runner: profiling: a store, a heartbeat pool and the runs are required")
	}
	if d.Log == nil {
		d.Log = zap.NewNop()
	}
	pl := &Plane{db: d.DB, beat: d.Beat, tables: d.Tables, dialect: d.Dialect, id: d.Owner, log: d.Log,
		cfg: d.Config.Filled(), targets: d.Targets, runs: d.Runs, pm: newProfileMetrics()}
	pl.bg, pl.stopBG = context.WithCancel(context.Background())
	if d.Registerer != nil {
		for _, c := range pl.pm.collectors(pl) {
			if err := d.Registerer.Register(c); err != nil {
				pl.stopBG()
				return nil, fmt.Errorf("runner: register metrics: %w", err)
			}
		}
	}
	return pl, nil
}

// Config is the profiling the Plane works by, its defaults filled in.
func (pl *Plane) Config() config.Profiling { return pl.cfg }

// Start starts the sweeper (every profiling.sweep_interval, on every
// replica); a second Start does nothing.
func (pl *Plane) Start() {
	if !pl.started.CompareAndSwap(false, true) {
		return
	}
	pl.loops.Add(1)
	go pl.profileSweeper()
}

// Stop ends the background work: the sweeper, the polls of live leases for an
// operator's stop, and cuts the sweeper's stops in flight short (they hand
// their claims back). It waits for the sweeper; Close waits for the stops.
func (pl *Plane) Stop() {
	pl.stopBG()
	pl.loops.Wait()
}

// Close stops the Plane (Stop) and waits for the sweeper's stops in flight.
func (pl *Plane) Close() {
	pl.Stop()
	pl.live.closeStops()
}

// CountStep counts a persisted profile step by its result
// (autocapture_profile_steps_total); other kinds are not counted.
func (pl *Plane) CountStep(rec executor.StepRecord) { pl.pm.countProfileStep(rec) }

// dbNow reads the database's clock (Unix ms) through q.
func (pl *Plane) dbNow(ctx context.Context, q database.RowQuerier) (int64, error) {
	return pl.dialect.Now(ctx, q)
}
