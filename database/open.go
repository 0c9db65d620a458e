package database

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib" // database/sql over pgx for PostgreSQL
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	_ "modernc.org/sqlite" // database/sql driver "sqlite", no cgo
)

// Open opens the run store and the River driver over the same *sql.DB, so
// runs and their jobs commit in one transaction: PostgreSQL at databaseURL,
// or else the embedded SQLite file at sqlitePath.
func Open(databaseURL, sqlitePath string) (*sql.DB, Dialect, riverdriver.Driver[*sql.Tx], error) {
	if databaseURL == "" {
		return openSQLite(sqlitePath)
	}
	cfg, err := pgConfig(databaseURL)
	if err != nil {
		return nil, "", nil, err
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(20)
	db.SetMaxIdleConns(10)
	return db, Postgres, riverdatabasesql.New(db), nil
}

// pgConfig parses a PostgreSQL URL into the connection settings both pools
// (Open's and OpenBeat's) use.
func pgConfig(databaseURL string) (*pgx.ConnConfig, error) {
	u, err := url.Parse(databaseURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return nil, fmt.Errorf("runner: database url: want postgres://…, got a %q URL", schemeOf(databaseURL))
	}
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil { // pgx redacts the password in its errors
		return nil, fmt.Errorf("runner: database url: %w", err)
	}
	// Accept answers 200 only once runs and jobs are durable: commit
	// synchronously even on a server (or database) whose default is off. A
	// level named in the URL (?synchronous_commit=…) is the operator's choice.
	if _, chosen := cfg.RuntimeParams["synchronous_commit"]; !chosen {
		cfg.RuntimeParams["synchronous_commit"] = "on"
	}
	return cfg, nil
}

// Pool is what OpenBeat returns: a *sql.DB, or a BeatPool.
type Pool interface {
	Querier
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
	Close() error
}

// OpenBeat opens the heartbeat's own pool on the run store (see the runner's
// runner.Service's beat pool): a few connections the renewals of leases (runs, threads,
// profiles) use and nothing else, so a pool exhausted by the steps' writes,
// the deliveries and River never costs a live replica its leases. On SQLite it is a
// second connection to the file (a *sql.DB), which takes the write lock
// between the main connection's transactions (busy_timeout), instead of
// waiting for that connection among every goroutine that wants it.
//
// On PostgreSQL the connections are pgxpool's (a BeatPool), kept open
// (MinConns) and reopened in the background, never by a renewal against its
// deadline: through database/sql's own pool a renewal opens the connection
// it lacks within its timeout, and a slow connect, cancelled and restarted
// every tick, costs a live replica its leases. pgxpool creates a connection on a context of its own
// (puddle's initResourceValue: an acquirer that gives up does not cancel
// the connect; the connection joins the pool for the next renewal), and a
// renewal that times out mid-statement, which closes its connection, has it
// replaced at once (the release triggers the pool's health check).
func OpenBeat(databaseURL, sqlitePath string) (Pool, error) {
	if databaseURL == "" {
		db, err := sql.Open("sqlite", sqliteDSN(sqlitePath))
		if err != nil {
			return nil, fmt.Errorf("runner: open sqlite %s: %w", sqlitePath, err)
		}
		db.SetMaxOpenConns(1)
		return db, nil
	}
	cfg, err := pgConfig(databaseURL)
	if err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("runner: database url: %w", err)
	}
	pc.ConnConfig = cfg
	if cfg.ConnectTimeout == 0 { // a connect that hangs would hold a slot for good
		pc.ConnConfig.ConnectTimeout = beatConnectTimeout
	}
	// The renewer's runs and its threads renew side by side; a profile
	// lease's renewal has its own timer: three connections kept open. Up to
	// three more while broken ones are let go: pgx closes a connection
	// whose statement was cancelled or cut by first sending the server a
	// cancel request on a new connection (pgconn's asyncClose), and the
	// pool holds the closing one's place until that is done; with no room
	// beyond three, a database slow to accept kept the renewals from a new
	// connection for as long as three cancel requests took to connect.
	pc.MinConns, pc.MaxConns = 3, 6
	pc.MaxConnIdleTime = time.Minute   // the extra ones go once things are calm
	pc.HealthCheckPeriod = time.Second // how soon a connection lost with the database is reopened
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		return nil, fmt.Errorf("runner: heartbeat pool: %w", err)
	}
	return BeatPool{DB: stdlib.OpenDBFromPool(pool), pool: pool}, nil
}

// beatConnectTimeout bounds the heartbeat pool's connects when the URL
// names no connect_timeout.
const beatConnectTimeout = 15 * time.Second

// BeatPool is database/sql over a pgxpool.Pool: closing it closes both.
type BeatPool struct {
	*sql.DB
	pool *pgxpool.Pool
}

// Ready waits until the pool has a connection (one it holds, or one it
// opens: the connect goes on should ctx end first) and leaves it in the pool.
func (b BeatPool) Ready(ctx context.Context) error {
	c, err := b.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	c.Release()
	return nil
}

func (b BeatPool) Close() error {
	err := b.DB.Close()
	b.pool.Close()
	return err
}

// openSQLite opens the embedded store in WAL mode with synchronous=FULL: every
// commit is fsynced before Accept answers 200, so accepted runs survive a power
// loss, not only a crash of the process (NORMAL's guarantee). River's SQLite
// driver wants a pool of one connection (parallel operations otherwise fail
// with SQLITE_BUSY); busy_timeout and BEGIN IMMEDIATE make two processes on one
// file wait for each other instead of failing.
func openSQLite(path string) (*sql.DB, Dialect, riverdriver.Driver[*sql.Tx], error) {
	if path == "" {
		return nil, "", nil, fmt.Errorf("runner: no database url and no SQLite path")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, "", nil, fmt.Errorf("runner: sqlite %s: %w", path, err)
	}
	db, err := sql.Open("sqlite", sqliteDSN(path))
	if err != nil {
		return nil, "", nil, fmt.Errorf("runner: open sqlite %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	return db, SQLite, riversqlite.New(db), nil
}

// sqliteDSN is the embedded store's connection string (see openSQLite).
func sqliteDSN(path string) string {
	return "file:" + path + "?_pragma=busy_timeout(15000)&_pragma=journal_mode(WAL)" +
		"&_pragma=synchronous(FULL)&_pragma=foreign_keys(ON)&_txlock=immediate"
}

func schemeOf(raw string) string {
	if i := strings.Index(raw, "://"); i > 0 {
		return raw[:i]
	}
	return "non-URL"
}
