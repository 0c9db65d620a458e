package runner

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river/riverdriver"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/database"
)

// Backoff between the attempts of a start step, and the bound on one ping
// (a server that neither takes the connection nor refuses it).
const (
	startupFirstBackoff = 250 * time.Millisecond
	startupMaxBackoff   = 5 * time.Second
	startupPingTimeout  = 5 * time.Second
)

// startup retries the steps of a replica's start that talk to PostgreSQL —
// the first ping, the migrations (River's and ours), the link key, River's
// start — so that a replica (re)started while the database fails over or
// restarts comes up once it is back instead of exiting (and a Kubernetes
// restart backing off for minutes after it). The steps share one budget,
// database.startup_wait, counted from the start of Open. A failure that is
// not transient (a database that does not exist, a refused login, a
// migration's own error) ends the start at once. Each step is safe to run
// again after it failed part way: see migrate and Start.
type startup struct {
	wait  time.Duration
	until time.Time // the end of the budget; zero: one attempt per step
	log   *zap.Logger
}

// newStartup starts the budget of a start on d. SQLite has no outage to wait
// out: its steps are tried once, as with startup_wait 0.
func newStartup(d database.Dialect, wait time.Duration, log *zap.Logger) *startup {
	st := &startup{wait: wait, log: log}
	if d == database.Postgres && wait > 0 {
		st.until = time.Now().Add(wait)
	}
	return st
}

// do runs the start step named step until it succeeds, fails for good, ctx
// ends or the budget is spent, and logs each retry.
func (st *startup) do(ctx context.Context, step string, f func(context.Context) error) error {
	began, backoff := time.Now(), startupFirstBackoff
	for attempt := 1; ; attempt++ {
		err := f(ctx)
		switch {
		case err == nil && attempt > 1:
			st.log.Info("The database answers again; the start goes on.", zap.String("step", step), zap.Int("attempts", attempt),
				zap.Duration("took", time.Since(began)))
			return nil
		case err == nil:
			st.log.Debug("Finished a step of the start.", zap.String("step", step), zap.Duration("took", time.Since(began)))
			return nil
		case ctx.Err() != nil:
			return fmt.Errorf("runner: %s: %w", step, ctx.Err())
		case !transient(err) || st.until.IsZero():
			return err
		case !time.Now().Add(backoff).Before(st.until):
			return fmt.Errorf("%w (the database did not come back within database.startup_wait, %s)", err, st.wait)
		}
		st.log.Warn("The database is unavailable while this replica starts; retrying the step.", zap.String("step", step),
			zap.Int("attempt", attempt), zap.Duration("retry_in", backoff), zap.Error(err))
		select {
		case <-ctx.Done():
			return fmt.Errorf("runner: %s: %w", step, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, startupMaxBackoff)
	}
}

// prepareStore waits for PostgreSQL to answer, then migrates the store.
func prepareStore(ctx context.Context, st *startup, db *sql.DB, d database.Dialect, drv riverdriver.Driver[*sql.Tx]) error {
	if d == database.Postgres {
		err := st.do(ctx, "ping", func(ctx context.Context) error {
			pctx, cancel := context.WithTimeout(ctx, startupPingTimeout)
			defer cancel()
			if err := db.PingContext(pctx); err != nil {
				return fmt.Errorf("runner: database: %w", err)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return st.do(ctx, "migrations", func(ctx context.Context) error { return database.Migrate(ctx, db, d, drv) })
}

// transient says whether a failure to reach PostgreSQL may pass by itself:
//   - the server's own answers while it goes away or comes back: class 08
//     (connection exception), 57P01 admin_shutdown (a fast shutdown or
//     pg_terminate_backend ended the session), 57P02 crash_shutdown, 57P03
//     cannot_connect_now (starting up, shutting down, in recovery), 53300
//     too_many_connections, 57014 query_canceled (a session still being set
//     up when a fast shutdown began was ended with it: "FATAL: canceling
//     statement due to user request" inside the connect error; our own
//     cancel, ctx, is told apart before this is asked);
//   - no answer: a connection refused, reset or timed out (net.Error, the
//     errno), a session cut mid-statement (io.EOF, io.ErrUnexpectedEOF,
//     pgconn.ErrConnClosed, pgconn's SafeToRetry and Timeout), a pooled
//     connection found dead (database/sql's driver.ErrBadConn, sql.ErrConnDone).
//
// pgx wraps a failed connect in a pgconn.ConnectError, which counts by its
// cause: a server's refusal inside it (3D000 no such database, 28P01 bad
// password) is a PgError and not transient, nor is a TLS or any other error.
func transient(err error) bool {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch pg.Code {
		case "57P01", "57P02", "57P03", "53300", "57014":
			return true
		}
		return strings.HasPrefix(pg.Code, "08")
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) ||
		errors.Is(err, context.DeadlineExceeded) || pgconn.SafeToRetry(err) || pgconn.Timeout(err)
}
