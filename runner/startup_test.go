package runner

import (
	"context"
	"crypto/tls"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/rivermigrate"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/vocab"
)

// TestStartupRetriesAStepKilledMidway: a start step whose session is killed
// (pg_terminate_backend: 57P01, as a fast shutdown or a failover ends it)
// while it waits on a lock half way through is run again from the start and
// completes once the lock is gone: River's migration 004 after it altered
// river_job and created river_queue (its transaction rolled back, the
// migrator applies 004 again, whole); ours after migrations 1 and 2 ran in
// the transaction (all of ours again); and River's client start, while its
// first producer writes its river_queue row (the failed client is started
// again and works a run).
func TestStartupRetriesAStepKilledMidway(t *testing.T) {
	riverMigrate := func(t *testing.T, dsn string, target int) {
		t.Helper()
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		db := stdlib.OpenDB(*cfg)
		defer db.Close()
		m, err := rivermigrate.New(riverdatabasesql.New(db), nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Migrate(context.Background(), rivermigrate.DirectionUp, &rivermigrate.MigrateOpts{TargetVersion: target}); err != nil {
			t.Fatalf("river migrations up to %d: %v", target, err)
		}
	}
	for _, tc := range []struct {
		name string
		// prepare readies the database; lock is what the test holds; waiter
		// matches the statement that waits on it.
		prepare      func(t *testing.T, dsn string)
		lock, waiter string
		step         string
		start        bool // the lock is met in Start, not in Open
	}{
		{name: "river migration", step: "migrations",
			prepare: func(t *testing.T, dsn string) { riverMigrate(t, dsn, 3) },
			lock:    `LOCK TABLE river_leader IN ACCESS EXCLUSIVE MODE`, waiter: `%ALTER TABLE%river_job ALTER COLUMN args SET DEFAULT%`},
		{name: "our migration", step: "migrations",
			prepare: func(t *testing.T, dsn string) { riverMigrate(t, dsn, 0) },
			lock:    `LOCK TABLE river_job IN ACCESS EXCLUSIVE MODE`, waiter: `%FROM river_job%`},
		{name: "river start", step: "river start", start: true,
			prepare: func(t *testing.T, dsn string) {
				s, err := Open(context.Background(), Options{DatabaseURL: dsn, Planner: planner(), Log: zap.NewNop()})
				if err != nil {
					t.Fatal(err)
				}
				s.Close()
			},
			lock: `LOCK TABLE river_queue IN ACCESS EXCLUSIVE MODE`, waiter: `%INSERT INTO%river_queue%`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dsn := testenv.StartPostgres(t)
			tc.prepare(t, dsn)
			core, logs := observer.New(zap.InfoLevel)
			o := Options{Config: fastRuns(), DatabaseURL: dsn, DatabaseWait: 30 * time.Second, Planner: planner(),
				Log: zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), core)), Registerer: prometheus.NewRegistry()}
			l := holdLock(t, dsn, tc.lock)
			var s *Service
			done := make(chan error, 1)
			if tc.start {
				var err error
				if s, err = Open(context.Background(), o); err != nil {
					t.Fatalf("open: %v", err)
				}
				defer s.Close()
				go func() { done <- s.Start(context.Background()) }()
			} else {
				go func() {
					var err error
					s, err = Open(context.Background(), o)
					done <- err
				}()
			}
			killed := l.killWaiters(t, tc.waiter, done)
			l.waitForWaiter(t, tc.waiter, done) // the step again, from its start
			l.release()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("the start ended with %v after its session was killed (%d backends)", err, killed)
				}
			case <-time.After(60 * time.Second):
				t.Fatal("the start has not ended 60 s after the lock was released")
			}
			if !tc.start {
				defer s.Close()
			}
			if n := logs.FilterMessage(startupRetried).FilterField(zap.String("step", tc.step)).Len(); n == 0 {
				t.Errorf("no retry of step %s logged: %v", tc.step, logs.All())
			}
			checkMigrated(t, s.db.(*sql.DB))
			if tc.start {
				acc := acceptOne(t, s, firing("fp-start", time.Now().UTC()))
				if r := waitRun(t, s, acc.RunID, "finished", isFinished); r.Status != vocab.StatusSucceeded {
					t.Errorf("the run after the start ended %s (%s)", r.Status, r.Reason)
				}
			}
		})
	}
}

// checkMigrated checks that every River migration and every one of ours is
// recorded once, and that the tables migration 004 and our 3 made are there.
func checkMigrated(t *testing.T, db *sql.DB) {
	t.Helper()
	m, err := rivermigrate.New(riverdatabasesql.New(db), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	have, err := m.ExistingVersions(ctx)
	if err != nil || len(have) != len(m.AllVersions()) {
		t.Errorf("river migrations recorded: %d (%v), want %d", len(have), err, len(m.AllVersions()))
	}
	var ours, top int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*), MAX(version) FROM autocapture_migrations`).Scan(&ours, &top); err != nil ||
		ours != database.Latest() || top != database.Latest() {
		t.Errorf("our migrations recorded: %d up to %d (%v), want %d", ours, top, err, database.Latest())
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM river_queue`).Scan(&n); err != nil {
		t.Errorf("river_queue (River's migration 004): %v", err)
	}
	if err := db.QueryRowContext(ctx, `SELECT COUNT(river_job_id) FROM autocapture_runs`).Scan(&n); err != nil {
		t.Errorf("autocapture_runs.river_job_id (our migration 3): %v", err)
	}
}

// lockHolder is a session holding a lock in an open transaction, and one
// watching who waits on it (outside a transaction: pg_stat_activity is read
// once per transaction).
type lockHolder struct {
	tx    pgx.Tx
	watch *pgx.Conn
}

// holdLock takes lock (a LOCK TABLE) in a transaction of a session of its own.
func holdLock(t *testing.T, dsn, lock string) *lockHolder {
	t.Helper()
	ctx := context.Background()
	connect := func() *pgx.Conn {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close(context.Background()) })
		return conn
	}
	tx, err := connect().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, lock); err != nil {
		t.Fatalf("%s: %v", lock, err)
	}
	return &lockHolder{tx: tx, watch: connect()}
}

// waiters are the sessions of the database waiting on a lock whose statement
// is like pattern.
func (l *lockHolder) waiters(t *testing.T, pattern string) []int {
	t.Helper()
	rows, err := l.watch.Query(context.Background(), `SELECT pid FROM pg_stat_activity WHERE datname = current_database()
		AND wait_event_type = 'Lock' AND query LIKE $1`, pattern)
	if err != nil {
		t.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	return pids
}

// waitForWaiter waits (up to 30 s) for a session to wait on the lock with a
// statement like pattern, and returns their pids; the start (done) must not
// end first.
func (l *lockHolder) waitForWaiter(t *testing.T, pattern string, done <-chan error) []int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if pids := l.waiters(t, pattern); len(pids) > 0 {
			return pids
		}
		if time.Now().After(deadline) {
			t.Fatalf("no session waits on the lock with a statement like %q after 30 s", pattern)
		}
		select {
		case err := <-done:
			t.Fatalf("the start ended (%v) while a session of it was to wait on the lock with a statement like %q", err, pattern)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// killWaiters waits for sessions waiting on the lock with a statement like
// pattern and terminates them (57P01); it returns how many.
func (l *lockHolder) killWaiters(t *testing.T, pattern string, done <-chan error) int {
	t.Helper()
	pids := l.waitForWaiter(t, pattern, done)
	for _, pid := range pids {
		if _, err := l.watch.Exec(context.Background(), `SELECT pg_terminate_backend($1)`, pid); err != nil {
			t.Fatal(err)
		}
	}
	return len(pids)
}

// release ends the transaction, and the lock with it.
func (l *lockHolder) release() { _ = l.tx.Rollback(context.Background()) }

// TestTransient: what a start retries (PostgreSQL going away or coming back)
// and what it does not (the server's answer to a wrong config, any other
// error), as pgx, database/sql and the net package report them; the connect
// errors are real ones.
func TestTransient(t *testing.T) {
	dsn := testenv.StartPostgres(t)
	connect := func(dsn string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, dsn)
		if err == nil {
			c.Close(ctx)
			t.Fatalf("connect to %s succeeded", dsn)
		}
		return err
	}
	closed := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/x?sslmode=disable&connect_timeout=5", testenv.FreePort(t))
	missing := dsn[:len(dsn)-len("?sslmode=disable")] + "_missing?sslmode=disable"
	tlsRefused := dsn[:len(dsn)-len("?sslmode=disable")] + "?sslmode=require"
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"refused connect", connect(closed), true},
		{"57P01 admin shutdown", fmt.Errorf("runner: start river: %w", &pgconn.PgError{Code: "57P01"}), true},
		{"57P03 starting up", &pgconn.PgError{Code: "57P03"}, true},
		{"57014 a connect cut by a fast shutdown", fmt.Errorf("runner: database: %w", &pgconn.PgError{Severity: "FATAL", Code: "57014"}), true},
		{"53300 too many connections", &pgconn.PgError{Code: "53300"}, true},
		{"08006 connection failure", &pgconn.PgError{Code: "08006"}, true},
		{"bad connection from the pool", fmt.Errorf("x: %w", driver.ErrBadConn), true},
		{"connection done", sql.ErrConnDone, true},
		{"eof", fmt.Errorf("receive: %w", io.ErrUnexpectedEOF), true},
		{"reset", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, true},
		{"conn closed", fmt.Errorf("x: %w", pgconn.ErrConnClosed), true},
		{"ping timeout", fmt.Errorf("runner: database: %w", context.DeadlineExceeded), true},
		{"no such database", connect(missing), false},
		{"server without TLS", connect(tlsRefused), false},
		{"42601 a migration's syntax error", &pgconn.PgError{Code: "42601"}, false},
		{"28P01 bad password", &pgconn.PgError{Code: "28P01"}, false},
		{"a bad certificate", &tls.CertificateVerificationError{Err: errors.New("unknown authority")}, false},
		{"any other error", errors.New("runner: link key: the stored key is not 32+ bytes"), false},
	} {
		if got := transient(tc.err); got != tc.want {
			t.Errorf("%s: transient(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
