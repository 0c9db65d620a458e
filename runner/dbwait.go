package runner

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"
)

// waitForStore waits up to wait for PostgreSQL to answer, so that a replica
// (re)started while the database fails over or restarts comes up once it is
// back instead of exiting (and a Kubernetes restart backing off for minutes
// after it). A server that answers with an error other than "starting up" or
// "too many connections" (a database that does not exist, a refused login) is
// a configuration error: it ends the start at once.
func waitForStore(ctx context.Context, db *sql.DB, wait time.Duration, log *zap.Logger) error {
	deadline := time.Now().Add(wait)
	backoff := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := db.PingContext(pctx)
		cancel()
		switch {
		case err == nil:
			if attempt > 1 {
				log.Info("The run store answers.", zap.Int("attempts", attempt))
			}
			return nil
		case ctx.Err() != nil:
			return fmt.Errorf("runner: database: %w", ctx.Err())
		case !transient(err):
			return fmt.Errorf("runner: database: %w", err)
		case !time.Now().Add(backoff).Before(deadline):
			return fmt.Errorf("runner: database did not answer within database.startup_wait (%s): %w", wait, err)
		}
		log.Warn("The run store does not answer yet; retrying.", zap.Int("attempt", attempt),
			zap.Duration("retry_in", backoff), zap.Error(err))
		select {
		case <-ctx.Done():
			return fmt.Errorf("runner: database: %w", ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// transient says whether a failure to reach PostgreSQL may pass by itself:
// no answer at all (refused, reset, timed out), or the server's own "starting
// up / shutting down" (57P03 cannot_connect_now, 57P01 admin_shutdown) or
// "too many connections" (53300).
func transient(err error) bool {
	var pg *pgconn.PgError
	if !errors.As(err, &pg) {
		return true
	}
	switch pg.Code {
	case "57P03", "57P01", "53300":
		return true
	}
	return false
}
