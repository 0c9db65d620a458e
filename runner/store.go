package runner

import (
	"database/sql"

	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/runner/lifecycle"
)

// store is a pool of the run store as Open opens it and Close closes it (the
// typed statements of package database run on it): the *sql.DB in
// production. Every part reads and writes through it. It is the seam tests
// cut to make a Service behave as a crashed process (every later statement
// fails, nothing more is written), and to hold a statement the way a process
// stalled before it would. River keeps the *sql.DB itself.
type store interface {
	lifecycle.Store
	Close() error
}

var (
	_ store            = (*sql.DB)(nil)
	_ database.Querier = store(nil)
)
