package profiling

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/runner/runs"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type planeOpt func(*Deps)

// newPlane opens db the way the run service does (migrated; a store and a
// heartbeat pool) and builds one process's Plane on it, its store behind the
// crash seam (cutStore); start also starts its sweeper. Cleanup closes it.
func newPlane(t testing.TB, db testenv.DB, start bool, opts ...planeOpt) *Plane {
	t.Helper()
	ctx := context.Background()
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
	cut := &cutStore{Store: raw}
	tables := database.NewTables(d)
	deps := Deps{DB: cut, Beat: &cutStore{Store: beat, of: cut}, Tables: tables, Dialect: d,
		Owner: fmt.Sprintf("test/%d/%s", os.Getpid(), uuid.NewString()[:8]), Log: zaptest.NewLogger(t),
		Registerer: prometheus.NewRegistry(), Runs: tableRuns{db: cut, tables: tables}}
	for _, f := range opts {
		f(&deps)
	}
	pl, err := New(deps)
	if err != nil {
		raw.Close()
		beat.Close()
		t.Fatalf("new plane: %v", err)
	}
	t.Cleanup(func() {
		pl.Close()
		raw.Close()
		beat.Close()
	})
	if start {
		pl.Start()
	}
	return pl
}

// tableRuns answers Runs from the runs table, as the run service does.
type tableRuns struct {
	db     Store
	tables database.Tables
}

func (r tableRuns) CheckRun(ctx context.Context, runID string) error {
	ok, err := r.tables.Runs.Exists(ctx, r.db, runID)
	if err != nil {
		return fmt.Errorf("runner: get run %s: %w", runID, err)
	}
	if !ok {
		return fmt.Errorf("%w: %s", runs.ErrNotFound, runID)
	}
	return nil
}

// insertRun writes a queued run for fingerprint fp and returns its id: the
// row the plane's sweeps and checks read of a run.
func insertRun(t *testing.T, pl *Plane, fp string) string {
	t.Helper()
	now := time.Now().UnixMilli()
	id := uuid.NewString()
	in, err := pl.tables.Runs.Insert(context.Background(), pl.db, []database.NewRun{{ID: id, Key: "key-" + fp,
		Fingerprint: fp, Alertname: "A", Alert: `{}`, StartsAt: now, Status: "queued", CreatedAt: now, QueuedAt: now}})
	if err != nil || len(in) != 1 {
		t.Fatalf("insert run %s: %v (%d written)", fp, err, len(in))
	}
	return id
}

// cutStore is the crash seam of a test Plane, as the run service's tests
// have it: cut makes every later statement fail before it reaches the
// database (as a crashed process writes nothing more).
type cutStore struct {
	Store
	cut atomic.Bool
	// of is the Plane's store seam when this one wraps its heartbeat pool:
	// its cut is that one's, so a crashed process renews nothing.
	of *cutStore
}

var errCut = errors.New("test: the process crashed, its store is cut off")

func (c *cutStore) before() error {
	if c.of != nil {
		return c.of.before()
	}
	if c.cut.Load() {
		return errCut
	}
	return nil
}

func (c *cutStore) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if err := c.before(); err != nil {
		return nil, err
	}
	return c.Store.ExecContext(ctx, query, args...)
}

func (c *cutStore) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if err := c.before(); err != nil {
		return nil, err
	}
	return c.Store.QueryContext(ctx, query, args...)
}

// QueryRowContext of a cut store answers a row whose Scan fails (a *sql.Row
// cannot be built with an error: the query runs on a cancelled context).
func (c *cutStore) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if err := c.before(); err != nil {
		dead, cancel := context.WithCancelCause(ctx)
		cancel(err)
		return c.Store.QueryRowContext(dead, query, args...)
	}
	return c.Store.QueryRowContext(ctx, query, args...)
}

func (c *cutStore) BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error) {
	if err := c.before(); err != nil {
		return nil, err
	}
	return c.Store.BeginTx(ctx, opts)
}

// crash makes pl behave as a process killed with kill -9: it writes nothing more.
func crash(pl *Plane) { pl.db.(*cutStore).cut.Store(true) }

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
