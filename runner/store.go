package runner

import (
	"context"
	"database/sql"
	"strings"
)

// store is what the Service reads and writes its own tables through: the
// *sql.DB in production. It is the seam tests cut to make a Service behave as
// a crashed process (every later statement fails, nothing more is written),
// and to hold a statement the way a process stalled before it would.
// River keeps the *sql.DB itself.
type store interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
	Close() error
}

var _ store = (*sql.DB)(nil)

// nowMS is the database's clock in Unix milliseconds, as an SQL expression.
//
// Leases, the reaper and cooldowns compare times written by one replica with
// the clock of another: they all use this clock, never a replica's own, so a
// skewed replica can neither steal a live run (its clock ahead) nor leave a
// dead one unresumed (behind), and River (which stamps its jobs with the
// database's clock too) agrees with them.
//
// PostgreSQL: statement_timestamp(), the time the server received the
// statement. It is STABLE, so `lease_until < now` can use an index (the
// volatile clock_timestamp() cannot), and a lease it writes ends no earlier
// than lease_timeout after the client sent the renewal, which is what the
// heartbeat's watchdog counts from. now() would be the transaction's start:
// older than the statement inside a transaction that waited on a lock.
// SQLite: unixepoch('subsec'), fixed for the whole statement.
func (d dialect) nowMS() string {
	if d == dialectPostgres {
		return `CAST(extract(epoch from statement_timestamp()) * 1000 AS BIGINT)`
	}
	return `CAST(unixepoch('subsec') * 1000 AS INTEGER)`
}

// unlockedRuns is an UPDATE's condition on autocapture_runs narrowed to the
// rows matching cond that no other transaction holds locked (PostgreSQL:
// FOR UPDATE SKIP LOCKED): the caller tells a skipped row from one that did
// not match. SQLite has no row locks (a writer holds the whole database):
// cond as it is.
func (d dialect) unlockedRuns(cond string) string {
	if d != dialectPostgres {
		return cond
	}
	return `id IN (SELECT id FROM autocapture_runs WHERE ` + cond + ` FOR UPDATE SKIP LOCKED)`
}

// sql returns q with each {now} replaced by the database's clock (nowMS).
func (d dialect) sql(q string) string { return strings.ReplaceAll(q, "{now}", d.nowMS()) }

// dbNow reads the database's clock (Unix ms) through q.
func (s *Service) dbNow(ctx context.Context, q querier) (int64, error) {
	var ms int64
	err := q.QueryRowContext(ctx, `SELECT `+s.dialect.nowMS()).Scan(&ms)
	return ms, err
}
