package runner

import (
	"context"
	"database/sql"

	"github.com/autocapture/autocapture/database"
)

// store is what the Service reads and writes its own tables through (the
// typed statements of package database run on it): the *sql.DB in production. It is the seam tests cut to make a Service behave as
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

var (
	_ store            = (*sql.DB)(nil)
	_ database.Querier = store(nil)
)

// dialect is the run store's database (database.Dialect), whose statements
// are all in package database.
type dialect = database.Dialect

const (
	dialectSQLite   = database.SQLite
	dialectPostgres = database.Postgres
)

// dbNow reads the database's clock (Unix ms) through q.
func (s *lifecycle) dbNow(ctx context.Context, q querier) (int64, error) {
	return s.dialect.Now(ctx, q)
}
