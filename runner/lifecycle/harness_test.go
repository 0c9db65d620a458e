package lifecycle

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/alertmanager/template"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"go.uber.org/zap/zaptest"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/internal/testkit/crashstore"
	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/internal/testkit/runwait"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/artifacts"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/runner/grouping"
	"github.com/autocapture/autocapture/runner/outbox"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// fastRuns are settings that make resumes take seconds, with a lease of 20
// heartbeats so a loaded test machine does not lose it.
func fastRuns() config.Runs {
	return config.Runs{MaxConcurrent: 4, MaxAttempts: 3, DefaultTimeout: time.Minute,
		HeartbeatInterval: 100 * time.Millisecond, LeaseTimeout: 2 * time.Second,
		ShutdownGrace: 300 * time.Millisecond, Lookback: 10 * time.Minute}
}

// proc is one process's Runs on a migrated store, as the runner composes
// them, with River's client over the runs' worker only, the real grouper,
// and the outbox, the artifacts' Keeper and the profiling plane stood in for.
type proc struct {
	*Runs
	db      *crashstore.Store // the Runs' store seam: cut, the process is crashed
	raw     *sql.DB
	dialect database.Dialect
	tables  database.Tables
	client  *river.Client[*sql.Tx]
	out     *recOutbox
	art     *fakeKeeper
	plane   *fakePlane
	reg     *prometheus.Registry
}

// procOpts are what a test changes of a proc before it is built.
type procOpts struct {
	cfg     config.Runs
	replica string
	now     func() time.Time
	reg     *prometheus.Registry
}

type procOpt func(*procOpts)

// withReplica names the process's replica (runs.replica).
func withReplica(name string) procOpt { return func(o *procOpts) { o.replica = name } }

// withConfig changes the process's runs.* settings.
func withConfig(f func(*config.Runs)) procOpt { return func(o *procOpts) { f(&o.cfg) } }

// newProc opens a process's Runs on db; start also starts its workers.
// Cleanup stops and closes it.
func newProc(t testing.TB, db testenv.DB, p Planner, start bool, opts ...procOpt) *proc {
	t.Helper()
	ctx := context.Background()
	o := procOpts{cfg: fastRuns(), reg: prometheus.NewRegistry()}
	for _, f := range opts {
		f(&o)
	}
	o.cfg = o.cfg.Filled()
	raw, d, drv, err := database.Open(db.URL, db.Path)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	if err := database.Migrate(ctx, raw, d, drv); err != nil {
		raw.Close()
		t.Fatalf("migrate store: %v", err)
	}
	beat, err := database.OpenBeat(db.URL, db.Path)
	if err != nil {
		raw.Close()
		t.Fatalf("open heartbeat pool: %v", err)
	}
	cut := crashstore.New(raw)
	pr := &proc{db: cut, raw: raw, dialect: d, tables: database.NewTables(d), out: newRecOutbox(t, raw, d),
		art: &fakeKeeper{}, plane: &fakePlane{}, reg: o.reg}
	owner := fmt.Sprintf("%s/%d/%s", artifacts.ReplicaName(o.replica), os.Getpid(), uuid.NewString()[:8])
	log := zaptest.NewLogger(t)
	pr.Runs = New(Deps{Config: o.cfg, Planner: p, Now: o.now, DB: cut, Beat: cut.Beside(beat),
		Dialect: d, Owner: owner, Log: log, Registerer: o.reg,
		Retry: func(ctx context.Context, _ string, f func(context.Context) error) error { return f(ctx) }})
	pr.art.out = pr.out
	grp, err := grouping.New(grouping.Deps{DB: cut, Tables: pr.tables, Outbox: pr.out, Runs: pr.Seams().Grouper,
		Planner: p, Lookback: o.cfg.Lookback, Owner: owner, Log: log})
	if err != nil {
		t.Fatalf("new grouper: %v", err)
	}
	workers := river.NewWorkers()
	if err := pr.AddWorker(workers); err != nil {
		t.Fatal(err)
	}
	poll := min(time.Second, o.cfg.HeartbeatInterval)
	pr.client, err = river.NewClient(drv, &river.Config{ID: owner, Queues: pr.Queues(), Workers: workers,
		JobTimeout: -1, RescueStuckJobsAfter: time.Hour, MaxAttempts: JobMaxAttempts,
		FetchPollInterval: poll, FetchCooldown: min(100*time.Millisecond, poll),
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("river client: %v", err)
	}
	if err := pr.Attach(Parts{Client: pr.client, Outbox: pr.out, Grouper: grp, Keeper: pr.art, Plane: pr.plane}); err != nil {
		t.Fatalf("attach: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := pr.Stop(ctx); err != nil && !pr.db.IsCut() {
			t.Errorf("stop: %v", err)
		}
		pr.Close()
		raw.Close()
		beat.Close()
	})
	if start {
		if err := pr.Start(ctx); err != nil {
			t.Fatalf("start runs: %v", err)
		}
	}
	return pr
}

// abandon makes p behave as a crashed process: its store is cut off (no more
// heartbeats, releases, step records or reaping reach the database), its
// background work ended, every run interrupted at once, its River client
// stopped with its jobs cancelled, its leases left to expire.
func (p *proc) abandon() {
	p.db.Cut()
	p.StopBackground()
	p.Interrupt(fmt.Errorf("%w: process crashed (test)", executor.ErrInterrupted))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = p.client.StopAndCancel(ctx)
}

// recOutbox records the thread operations the Runs (and the grouper)
// append, in the caller's transaction, in a table of its own: an operation
// commits with the state it reports, or is gone with it. Every append is a
// row; the real outbox keeps one per key.
type recOutbox struct {
	db      *sql.DB
	dialect database.Dialect
	mu      sync.Mutex
	claimed []string // Claimed calls: "run n owner"
}

func newRecOutbox(t testing.TB, db *sql.DB, d database.Dialect) *recOutbox {
	t.Helper()
	seq := "INTEGER PRIMARY KEY AUTOINCREMENT"
	if d == database.Postgres {
		seq = "BIGSERIAL PRIMARY KEY"
	}
	if _, err := db.ExecContext(context.Background(), `CREATE TABLE IF NOT EXISTS test_thread_ops (seq `+seq+
		`, run_id TEXT NOT NULL, op_key TEXT NOT NULL, op TEXT NOT NULL)`); err != nil {
		t.Fatalf("thread ops table: %v", err)
	}
	return &recOutbox{db: db, dialect: d}
}

// recOp is one recorded append: the operation's key in its thread, and the
// operation as Go prints it (outbox.Resumed{N:1 From:r0/… On:}).
type recOp struct{ key, op string }

func (o *recOutbox) record(ctx context.Context, tx *sql.Tx, runID string, key, op string) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO test_thread_ops (run_id, op_key, op) VALUES ($1, $2, $3)`, runID, key, op)
	return err
}

func (o *recOutbox) Sinks() []string { return []string{"default"} }

func (o *recOutbox) Append(ctx context.Context, tx *sql.Tx, runID string, ops ...outbox.Op) error {
	for _, op := range ops {
		if err := o.record(ctx, tx, runID, op.Key(), fmt.Sprintf("%T%+v", op, op)); err != nil {
			return err
		}
	}
	return nil
}

func (o *recOutbox) AppendGroup(ctx context.Context, tx *sql.Tx, lead string, ops ...outbox.Op) error {
	for _, op := range ops {
		if err := o.record(ctx, tx, lead, "group/"+op.Key(), fmt.Sprintf("%T%+v", op, op)); err != nil {
			return err
		}
	}
	return nil
}

func (o *recOutbox) AppendResolved(ctx context.Context, tx *sql.Tx, ids []string) error {
	for _, id := range ids {
		if err := o.Append(ctx, tx, id, outbox.Resolved{}); err != nil {
			return err
		}
	}
	return nil
}

func (o *recOutbox) Claimed(_ context.Context, _ *sql.Tx, runID string, n int, owner string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.claimed = append(o.claimed, fmt.Sprintf("%s %d %s", runID, n, owner))
	return nil
}

// claims are the Claimed calls so far: "run n owner".
func (o *recOutbox) claims() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.claimed)
}

func (o *recOutbox) RenewBeside(context.Context, *sync.WaitGroup) {}

func (o *recOutbox) Sweep(context.Context) (int, error) { return 0, nil }

// ops are the operations committed for run id, in the order they were.
func (o *recOutbox) ops(t testing.TB, id string) []recOp {
	t.Helper()
	rows, err := o.db.QueryContext(context.Background(), `SELECT op_key, op FROM test_thread_ops WHERE run_id = $1 ORDER BY seq`, id)
	if err != nil {
		t.Fatalf("thread ops of %s: %v", id, err)
	}
	defer rows.Close()
	var out []recOp
	for rows.Next() {
		var r recOp
		if err := rows.Scan(&r.key, &r.op); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// count is how many appends of run id had key.
func (o *recOutbox) count(t testing.TB, id, key string) int {
	t.Helper()
	n := 0
	for _, r := range o.ops(t, id) {
		if r.key == key {
			n++
		}
	}
	return n
}

// eventually waits (up to 20 s) until run id's thread has an operation
// keyed key: the Runs record some after the state (a run's end).
func (o *recOutbox) eventually(t testing.TB, id, key string) {
	t.Helper()
	waitFor(t, "operation "+key+" of run "+id, func() bool { return o.count(t, id, key) > 0 })
}

// fakeKeeper stands in for the artifacts' Keeper: no byte cap, links or
// uploads; the manifest asks are recorded as thread operations are, in the
// caller's transaction (key "manifest").
type fakeKeeper struct {
	out *recOutbox
}

func (k *fakeKeeper) RunEnv(string, map[string]map[string]executor.StepRecord) *vocab.Env { return nil }

func (k *fakeKeeper) EnqueueManifestTx(ctx context.Context, tx *sql.Tx, runID string) error {
	return k.out.record(ctx, tx, runID, "manifest", "manifest")
}

func (k *fakeKeeper) SweepManifests(context.Context, time.Duration) (int, error) { return 0, nil }

func (k *fakeKeeper) LoadUploads(context.Context, database.RowsQuerier, string) ([]runs.Upload, error) {
	return nil, nil
}

func (k *fakeKeeper) Link(_ context.Context, _ string, a vocab.Artifact) (notify.Link, bool) {
	return notify.Link{Name: a.Name}, true
}

func (k *fakeKeeper) Pending(context.Context, string) bool { return false }

func (k *fakeKeeper) UploadsReply(context.Context, string, string, bool) (notify.StepReport, error) {
	return notify.StepReport{}, nil
}

// fakePlane counts the profile steps recorded.
type fakePlane struct{ steps atomic.Int64 }

func (p *fakePlane) CountStep(executor.StepRecord) { p.steps.Add(1) }

// fakePlanner, plan and planner are fakestep's Planner, Plan and OnePlan.
type fakePlanner = fakestep.Planner

func plan(name string, steps ...playbooks.PlannedStep) *playbooks.Plan {
	return fakestep.Plan(name, steps...)
}

func planner(steps ...func() playbooks.PlannedStep) fakePlanner { return fakestep.OnePlan(steps...) }

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
func acceptOne(t testing.TB, p *proc, a template.Alert) runs.Accepted {
	t.Helper()
	acc, err := p.Accept(context.Background(), []template.Alert{a})
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

// lease is what a run's row says of who holds it.
type lease struct {
	owner      sql.NullString // NULL: nobody holds it
	generation int            // its job's: the reaper's resumes count it up
}

// leaseOf reads run id's lease from its row.
func leaseOf(t testing.TB, p *proc, id string) lease {
	t.Helper()
	var l lease
	if err := p.raw.QueryRowContext(context.Background(), `SELECT owner, generation FROM autocapture_runs WHERE id = $1`, id).
		Scan(&l.owner, &l.generation); err != nil {
		t.Fatalf("lease of run %s: %v", id, err)
	}
	return l
}

// waitFor polls cond every 20 ms (a hang guard of 30 s, not a timing assertion).
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// hasOp says whether ops hold an operation whose printed form has every part.
func hasOp(ops []recOp, parts ...string) bool {
	for _, r := range ops {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(r.op, p)
		}
		if ok {
			return true
		}
	}
	return false
}
