package lifecycle

import (
	"context"
	"database/sql"

	"github.com/autocapture/autocapture/database"
)

// Store is what the runs read and write their tables through (the typed
// statements of package database run on it): the runner's pool, a *sql.DB in
// production, which the runner's tests wrap to make a process behave as
// crashed. River keeps the *sql.DB itself.
type Store interface {
	database.Querier
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

var _ Store = (*sql.DB)(nil)

// dbNow reads the database's clock (Unix ms) through q.
func (s *Runs) dbNow(ctx context.Context, q querier) (int64, error) {
	return s.dialect.Now(ctx, q)
}
