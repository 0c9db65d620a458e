// Package crashstore is the run store's seam in the run service's tests: a
// pool wrapped so that its process can behave as crashed (every later
// statement fails before it reaches the database, as a process killed with
// kill -9 writes nothing more) or stall before a statement.
package crashstore

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"

	"github.com/autocapture/autocapture/database"
)

// ErrCut is what every statement of a cut store fails with.
var ErrCut = errors.New("test: the process crashed, its store is cut off")

// Store wraps a pool of the run store. Cut it and every later statement
// fails; Hold, when set before the process starts, runs before each one.
type Store struct {
	database.Pool
	Hold func(ctx context.Context, query string, args []any)
	cut  atomic.Bool
	// of is the store this one was made beside (the heartbeat's pool beside
	// the process's): its cut and Hold are that one's, so a crashed process
	// renews nothing.
	of *Store
}

// New wraps p.
func New(p database.Pool) *Store { return &Store{Pool: p} }

// Beside wraps p, another pool of the same process (its heartbeat's), cut
// and held with s.
func (s *Store) Beside(p database.Pool) *Store { return &Store{Pool: p, of: s} }

// Cut makes the process behave as crashed from now on.
func (s *Store) Cut() { s.root().cut.Store(true) }

// IsCut says whether Cut was called.
func (s *Store) IsCut() bool { return s.root().cut.Load() }

func (s *Store) root() *Store {
	if s.of != nil {
		return s.of
	}
	return s
}

func (s *Store) before(ctx context.Context, query string, args []any) error {
	r := s.root()
	if r.Hold != nil {
		r.Hold(ctx, query, args)
	}
	if r.cut.Load() {
		return ErrCut
	}
	return nil
}

func (s *Store) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if err := s.before(ctx, query, args); err != nil {
		return nil, err
	}
	return s.Pool.ExecContext(ctx, query, args...)
}

func (s *Store) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if err := s.before(ctx, query, args); err != nil {
		return nil, err
	}
	return s.Pool.QueryContext(ctx, query, args...)
}

// QueryRowContext of a cut store answers a row whose Scan fails (a *sql.Row
// cannot be built with an error: the query runs on a cancelled context).
func (s *Store) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if err := s.before(ctx, query, args); err != nil {
		dead, cancel := context.WithCancelCause(ctx)
		cancel(err)
		return s.Pool.QueryRowContext(dead, query, args...)
	}
	return s.Pool.QueryRowContext(ctx, query, args...)
}

// Ready passes the heartbeat pool's wait for a connection through (see
// lifecycle's BeatReady); a cut store has none to wait for.
func (s *Store) Ready(ctx context.Context) error {
	if err := s.before(ctx, "ready", nil); err != nil {
		return err
	}
	if r, ok := s.Pool.(interface{ Ready(context.Context) error }); ok {
		return r.Ready(ctx)
	}
	return nil
}

func (s *Store) BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error) {
	if err := s.before(ctx, "BEGIN", nil); err != nil {
		return nil, err
	}
	return s.Pool.BeginTx(ctx, opts)
}
