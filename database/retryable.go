package database

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// Retryable says whether err is PostgreSQL aborting a transaction that can
// simply run again: a deadlock (40P01) or a serialization failure (40001).
// PostgreSQL's manual asks applications to retry these; nothing of the
// aborted transaction was kept.
func Retryable(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && (pg.Code == "40P01" || pg.Code == "40001")
}
