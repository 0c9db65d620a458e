// Package database is autocapture's store layer: every SQL statement of ours,
// the two dialects (SQLite, PostgreSQL), opening the database and its
// migrations (numbered files under migrations/, applied after River's).
//
// Statements are typed methods on small types, one per table or group of
// tables (Runs, Outbox, Threads, ProfileLeases, …, gathered in Tables for a
// dialect); each takes a Querier, so a caller runs it on the *sql.DB or
// inside its own *sql.Tx, beside River's InsertTx. Each statement's text is
// the one the runner ran before it moved here, with the comments on its
// locking and index use.
//
// The statements are written by hand, not generated (sqlc): several differ
// per dialect ({now}, SKIP LOCKED, GREATEST/MAX, River's JSON args and
// timestamps) and several are built from lists (multi-row INSERTs, IN
// lists), which a generator would leave outside anyway.
//
// Errors of Open, OpenBeat and Migrate keep the "runner: " texts they had
// before the move, which operators' logs and alerts may match.
package database

import (
	"context"
	"database/sql"
	"strings"
)

// Dialect is the run store's database: both speak the same SQL here ($n
// placeholders, RETURNING, ON CONFLICT DO NOTHING, partial unique indexes).
type Dialect string

const (
	SQLite   Dialect = "sqlite"
	Postgres Dialect = "postgres"
)

// Querier runs statements: *sql.DB, *sql.Tx, or a wrapper of either (the
// runner's tests cut one to simulate a crashed process).
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	RowsQuerier
	RowQuerier
}

// RowsQuerier lists rows: what a method that only reads needs.
type RowsQuerier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// RowQuerier reads one row: what a method that only reads one needs.
type RowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

var (
	_ Querier = (*sql.DB)(nil)
	_ Querier = (*sql.Tx)(nil)
)

// NowMS is the database's clock in Unix milliseconds, as an SQL expression.
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
func (d Dialect) NowMS() string {
	if d == Postgres {
		return `CAST(extract(epoch from statement_timestamp()) * 1000 AS BIGINT)`
	}
	return `CAST(unixepoch('subsec') * 1000 AS INTEGER)`
}

// UnlockedRuns is an UPDATE's condition on autocapture_runs narrowed to the
// rows matching cond that no other transaction holds locked (PostgreSQL:
// FOR UPDATE SKIP LOCKED): the caller tells a skipped row from one that did
// not match. SQLite has no row locks (a writer holds the whole database):
// cond as it is.
func (d Dialect) UnlockedRuns(cond string) string {
	if d != Postgres {
		return cond
	}
	return `id IN (SELECT id FROM autocapture_runs WHERE ` + cond + ` FOR UPDATE SKIP LOCKED)`
}

// SQL returns q with each {now} replaced by the database's clock (NowMS).
func (d Dialect) SQL(q string) string { return strings.ReplaceAll(q, "{now}", d.NowMS()) }

// Now reads the database's clock (Unix ms) through q.
func (d Dialect) Now(ctx context.Context, q RowQuerier) (int64, error) {
	var ms int64
	err := q.QueryRowContext(ctx, `SELECT `+d.NowMS()).Scan(&ms)
	return ms, err
}
