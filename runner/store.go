package runner

import (
	"context"
	"database/sql"

	"github.com/autocapture/autocapture/database"
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

// dialect is the run store's database (database.Dialect). The statements
// still written in runner files reach the dialect's helpers through it until
// they move into package database.
type dialect database.Dialect

const (
	dialectSQLite   = dialect(database.SQLite)
	dialectPostgres = dialect(database.Postgres)
)

// nowMS is the database's clock in Unix milliseconds, as an SQL expression
// (database.Dialect.NowMS).
func (d dialect) nowMS() string { return database.Dialect(d).NowMS() }

// unlockedRuns narrows an UPDATE's condition on autocapture_runs to the rows
// no other transaction holds locked (database.Dialect.UnlockedRuns).
func (d dialect) unlockedRuns(cond string) string { return database.Dialect(d).UnlockedRuns(cond) }

// sql returns q with each {now} replaced by the database's clock (nowMS).
func (d dialect) sql(q string) string { return database.Dialect(d).SQL(q) }

// dbNow reads the database's clock (Unix ms) through q.
func (s *Service) dbNow(ctx context.Context, q querier) (int64, error) {
	return database.Dialect(s.dialect).Now(ctx, q)
}
