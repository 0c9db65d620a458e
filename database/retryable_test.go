package database

import (
	"database/sql"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestRetryable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("accept: number: %w", &pgconn.PgError{Code: "40P01", Message: "deadlock detected"}), true},
		{&pgconn.PgError{Code: "40001", Message: "could not serialize access"}, true},
		{&pgconn.PgError{Code: "23505", Message: "duplicate key"}, false},
		{sql.ErrNoRows, false},
		{nil, false},
	} {
		if got := Retryable(tc.err); got != tc.want {
			t.Errorf("Retryable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
