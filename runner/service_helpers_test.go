package runner

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/internal/testkit/crashstore"
	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/internal/testkit/runwait"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/runner/lifecycle"
	"github.com/autocapture/autocapture/runner/runs"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// fastRuns are settings that make resumes take seconds, with a lease of 20
// heartbeats so a loaded test machine does not lose it.
func fastRuns() config.Runs {
	return config.Runs{MaxConcurrent: 4, MaxAttempts: 3, DefaultTimeout: time.Minute,
		HeartbeatInterval: 100 * time.Millisecond, LeaseTimeout: 2 * time.Second,
		ShutdownGrace: 300 * time.Millisecond, Lookback: 10 * time.Minute}
}

// fakePlanner, plan and planner are fakestep's Planner, Plan and OnePlan.
type fakePlanner = fakestep.Planner

func plan(name string, steps ...playbooks.PlannedStep) *playbooks.Plan {
	return fakestep.Plan(name, steps...)
}

func planner(steps ...func() playbooks.PlannedStep) fakePlanner { return fakestep.OnePlan(steps...) }

// recNotifier records what a run's thread would show.
type recNotifier struct {
	mu      sync.Mutex
	opens   []notify.RunInfo
	replies []notify.StepReport
	closes  []notify.Summary
}

func (n *recNotifier) Open(_ context.Context, r notify.RunInfo) (notify.Thread, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.opens = append(n.opens, r)
	return notify.Thread{Channel: "C1", TS: r.ID}, nil
}

func (n *recNotifier) Reply(_ context.Context, _ notify.Thread, r notify.StepReport) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.replies = append(n.replies, r)
	return nil
}

func (n *recNotifier) Close(_ context.Context, _ notify.Thread, s notify.Summary) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closes = append(n.closes, s)
	return nil
}

// eventually waits (up to 20 s) until cond holds of what the thread shows:
// threads are delivered by their own jobs, after the state they report.
func (n *recNotifier) eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		n.mu.Lock()
		ok := cond()
		n.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			n.mu.Lock()
			defer n.mu.Unlock()
			t.Fatalf("thread never showed %s: opens %d, replies %+v, closes %+v", what, len(n.opens), n.replies, n.closes)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type svcOpt func(*Options)

// notifyTo delivers the Service's threads to n.
func notifyTo(n notify.Notifier) svcOpt {
	return func(o *Options) { o.Notifiers = map[string]notify.Notifier{"default": n} }
}

// newService opens a Service on db; start also starts its workers. Cleanup
// stops and closes it.
func newService(t testing.TB, db testenv.DB, p lifecycle.Planner, start bool, opts ...svcOpt) *Service {
	t.Helper()
	o := Options{Config: fastRuns(), DatabaseURL: db.URL, SQLitePath: db.Path, Planner: p,
		Log: zaptest.NewLogger(t), Registerer: prometheus.NewRegistry()}
	for _, f := range opts {
		f(&o)
	}
	ctx := context.Background()
	d := database.SQLite
	if db.URL != "" {
		d = database.Postgres
	}
	o.wrapStores = func(db, beat store) (store, store) {
		cut := crashstore.New(db)
		return &cutStore{Store: cut, dialect: d}, &cutStore{Store: cut.Beside(beat), dialect: d}
	}
	s, err := Open(ctx, o)
	if err != nil {
		t.Fatalf("open runner: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := s.Stop(ctx); err != nil && !s.db.(*cutStore).IsCut() {
			t.Errorf("stop: %v", err)
		}
		s.Close()
	})
	if start {
		if err := s.Start(ctx); err != nil {
			t.Fatalf("start runner: %v", err)
		}
	}
	return s
}

// cutStore is the store seam of a test Service (crashstore), with the
// database it is on for the tests' own statements.
type cutStore struct {
	*crashstore.Store
	dialect database.Dialect
}

// abandon makes s behave as a crashed process: its store is cut off (no more
// heartbeats, releases, step records or reaping reach the database), its
// background work ended, every run interrupted at once, its River client
// stopped with its jobs cancelled, its leases left to expire.
func (s *Service) abandon() {
	s.db.(*cutStore).Cut()
	s.life.StopBackground()
	s.life.Interrupt(fmt.Errorf("%w: process crashed (test)", executor.ErrInterrupted))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = s.client.StopAndCancel(ctx)
}

func firing(fp string, startsAt time.Time) template.Alert {
	return template.Alert{Status: "firing", Fingerprint: fp, StartsAt: startsAt,
		Labels: template.KV{"alertname": "VLLMSlowTTFT", "instance": "127.0.0.1:8000"}}
}

func resolvedAlert(fp string, startsAt, endsAt time.Time) template.Alert {
	a := firing(fp, startsAt)
	a.Status, a.EndsAt = "resolved", endsAt
	return a
}

// acceptOne accepts one alert and returns its run id.
func acceptOne(t *testing.T, s *Service, a template.Alert) runs.Accepted {
	t.Helper()
	acc, err := s.Accept(context.Background(), []template.Alert{a})
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	return acc[0]
}

// The waits and reads of a run, shared with the other package's tests.
var (
	waitRun    = runwait.Until
	isFinished = runwait.Finished
	stepByID   = runwait.Step
)

// dialectOf is the database a test Service's store is on.
func dialectOf(s *Service) database.Dialect { return s.db.(*cutStore).dialect }

// tablesOf are the typed statements of a test Service's database.
func tablesOf(s *Service) database.Tables { return database.NewTables(dialectOf(s)) }

// rawDB is the *sql.DB under a test Service's store seam.
func rawDB(s *Service) *sql.DB { return s.db.(*cutStore).Pool.(*sql.DB) }

// crash makes s behave as a process killed with kill -9: it writes nothing more.
func crash(s *Service) { s.db.(*cutStore).Cut() }

// waitFor polls cond every 20 ms (a hang guard of 30 s, not a timing assertion).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
