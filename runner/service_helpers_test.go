package runner

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// dbRef is one database several processes may share; forEachStore runs a
// test on SQLite and on PostgreSQL (testenv.ForEachDB).
type dbRef = testenv.DB

var forEachStore = testenv.ForEachDB

// fastRuns are settings that make resumes take seconds, with a lease of 20
// heartbeats so a loaded test machine does not lose it.
func fastRuns() config.Runs {
	return config.Runs{MaxConcurrent: 4, MaxAttempts: 3, DefaultTimeout: time.Minute,
		HeartbeatInterval: 100 * time.Millisecond, LeaseTimeout: 2 * time.Second,
		ShutdownGrace: 300 * time.Millisecond, Lookback: 10 * time.Minute}
}

// fakePlanner returns hand-built plans; Rebuild returns the plan of the same name.
type fakePlanner struct {
	plans func(a template.Alert) []*playbooks.Plan
}

func (f fakePlanner) Plan(a template.Alert, _ vocab.Window) ([]*playbooks.Plan, error) {
	return f.plans(a), nil
}

func (f fakePlanner) Rebuild(sp playbooks.StoredPlan, a template.Alert, _ vocab.Window) (*playbooks.Plan, error) {
	for _, p := range f.plans(a) {
		if p.Playbook == sp.Playbook && p.Digest == sp.Digest {
			return p, nil
		}
	}
	return nil, fmt.Errorf("no playbook %s with digest %s", sp.Playbook, sp.Digest)
}

func plan(name string, steps ...playbooks.PlannedStep) *playbooks.Plan {
	return &playbooks.Plan{Playbook: name, File: name + ".yaml", Digest: "sha-" + name,
		Source: []byte("name: " + name), Steps: steps}
}

func planner(steps ...func() playbooks.PlannedStep) fakePlanner {
	return fakePlanner{plans: func(template.Alert) []*playbooks.Plan {
		ps := make([]playbooks.PlannedStep, len(steps))
		for i, s := range steps {
			ps[i] = s()
		}
		return []*playbooks.Plan{plan("pb", ps...)}
	}}
}

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
func newService(t testing.TB, db dbRef, p Planner, start bool, opts ...svcOpt) *Service {
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
		cut := &cutStore{store: db, dialect: d}
		return cut, &cutStore{store: beat, of: cut}
	}
	s, err := Open(ctx, o)
	if err != nil {
		t.Fatalf("open runner: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := s.Stop(ctx); err != nil && !s.db.(*cutStore).cut.Load() {
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

// cutStore is the store seam of a test Service: cut makes every later
// statement fail before it reaches the database (as a crashed process writes
// nothing more), and hold, when set before Start, runs before each statement.
type cutStore struct {
	store
	dialect database.Dialect // the database's, for the tests' own statements
	cut     atomic.Bool
	hold    func(ctx context.Context, query string, args []any)
	// of is the Service's db seam when this one wraps its heartbeat pool:
	// cut and hold are that one's, so a crashed process renews nothing.
	of *cutStore
}

var errCut = errors.New("test: the process crashed, its store is cut off")

func (c *cutStore) before(ctx context.Context, query string, args []any) error {
	if c.of != nil {
		return c.of.before(ctx, query, args)
	}
	if c.hold != nil {
		c.hold(ctx, query, args)
	}
	if c.cut.Load() {
		return errCut
	}
	return nil
}

func (c *cutStore) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if err := c.before(ctx, query, args); err != nil {
		return nil, err
	}
	return c.store.ExecContext(ctx, query, args...)
}

func (c *cutStore) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if err := c.before(ctx, query, args); err != nil {
		return nil, err
	}
	return c.store.QueryContext(ctx, query, args...)
}

// QueryRowContext of a cut store answers a row whose Scan fails (a *sql.Row
// cannot be built with an error: the query runs on a cancelled context).
func (c *cutStore) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if err := c.before(ctx, query, args); err != nil {
		dead, cancel := context.WithCancelCause(ctx)
		cancel(err)
		return c.store.QueryRowContext(dead, query, args...)
	}
	return c.store.QueryRowContext(ctx, query, args...)
}

// Ready passes the heartbeat pool's wait for a connection through (see
// lifecycle's BeatReady); a cut store has none to wait for.
func (c *cutStore) Ready(ctx context.Context) error {
	if err := c.before(ctx, "ready", nil); err != nil {
		return err
	}
	if r, ok := c.store.(interface{ Ready(context.Context) error }); ok {
		return r.Ready(ctx)
	}
	return nil
}

func (c *cutStore) BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error) {
	if err := c.before(ctx, "BEGIN", nil); err != nil {
		return nil, err
	}
	return c.store.BeginTx(ctx, opts)
}

// abandon makes s behave as a crashed process: its store is cut off (no more
// heartbeats, releases, step records or reaping reach the database), its
// background work ended, every run interrupted at once, its River client
// stopped with its jobs cancelled, its leases left to expire.
func (s *Service) abandon() {
	s.db.(*cutStore).cut.Store(true)
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

// waitRun polls the run until cond holds (a hang guard of 60 s, not a timing assertion).
func waitRun(t *testing.T, s *Service, id string, what string, cond func(*runs.Run) bool) *runs.Run {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		r, err := s.Get(context.Background(), id)
		if err != nil && !errors.Is(err, runs.ErrNotFound) {
			t.Fatalf("get run %s: %v", id, err)
		}
		if err == nil && cond(r) {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s never became %s; last: %+v", id, what, r)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func isFinished(r *runs.Run) bool { return r.FinishedAt != nil }

func stepByID(r *runs.Run, id string) executor.StepRecord {
	for _, s := range r.Steps {
		if s.ID == id {
			return s
		}
	}
	return executor.StepRecord{}
}

// dialectOf is the database a test Service's store is on.
func dialectOf(s *Service) database.Dialect { return s.db.(*cutStore).dialect }

// tablesOf are the typed statements of a test Service's database.
func tablesOf(s *Service) database.Tables { return database.NewTables(dialectOf(s)) }

// rawDB is the *sql.DB under a test Service's store seam.
func rawDB(s *Service) *sql.DB { return s.db.(*cutStore).store.(*sql.DB) }

// crash makes s behave as a process killed with kill -9: it writes nothing more.
func crash(s *Service) { s.db.(*cutStore).cut.Store(true) }

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
