package runner

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
	"github.com/riverqueue/river/rivermigrate"
	_ "modernc.org/sqlite" // database/sql driver "sqlite", no cgo
)

// dialect is the run store's database: both speak the same SQL here ($n
// placeholders, RETURNING, ON CONFLICT DO NOTHING, partial unique indexes).
type dialect string

const (
	dialectSQLite   dialect = "sqlite"
	dialectPostgres dialect = "postgres"
)

// openDB opens the run store and the River driver over the same *sql.DB, so
// runs and their jobs commit in one transaction.
func openDB(databaseURL, sqlitePath string) (*sql.DB, dialect, riverdriver.Driver[*sql.Tx], error) {
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
	return db, dialectPostgres, riverdatabasesql.New(db), nil
}

// pgConfig parses a PostgreSQL URL into the connection settings both pools
// (openDB's and openBeat's) use.
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

// openBeat opens the heartbeat's own pool on the run store (see
// Service.beat): a few connections the renewals of leases (runs, threads,
// profiles) use and nothing else, so a pool exhausted by the steps' writes,
// the deliveries and River never costs a live replica its leases
// (TestRenewalsDoNotWaitForABusyPool: on the main pool, a run whose pool
// was taken for three leases was stopped and resumed). On SQLite it is a
// second connection to the file, which takes the write lock between the main
// connection's transactions (busy_timeout), instead of waiting for that
// connection among every goroutine that wants it.
//
// On PostgreSQL the connections are pgxpool's, kept open (MinConns) and
// reopened in the background, never by a renewal against its deadline.
// Through database/sql's own pool a renewal opened the connection it lacked
// within its timeout (1.5 s with a 5 s lease), and a connect that took
// longer was cancelled and started again at the next tick: CI's HA run,
// whose first renewals came as 50 alerts arrived at three replicas,
// failed to connect every tick for 4.5 s on a live replica and 9 of its
// runs were stopped and resumed (failed to connect … timeout: context
// deadline exceeded). pgxpool creates a connection on a context of its own
// (puddle's initResourceValue: an acquirer that gives up does not cancel
// the connect; the connection joins the pool for the next renewal), and a
// renewal that times out mid-statement, which closes its connection, has it
// replaced at once (the release triggers the pool's health check).
func openBeat(databaseURL, sqlitePath string) (store, error) {
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
	return beatPool{DB: stdlib.OpenDBFromPool(pool), pool: pool}, nil
}

// beatConnectTimeout bounds the heartbeat pool's connects when the URL
// names no connect_timeout.
const beatConnectTimeout = 15 * time.Second

// beatPool is database/sql over a pgxpool.Pool: closing it closes both.
type beatPool struct {
	*sql.DB
	pool *pgxpool.Pool
}

// ready waits until the pool has a connection (one it holds, or one it
// opens: the connect goes on should ctx end first) and leaves it in the pool.
func (b beatPool) ready(ctx context.Context) error {
	c, err := b.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	c.Release()
	return nil
}

func (b beatPool) Close() error {
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
func openSQLite(path string) (*sql.DB, dialect, riverdriver.Driver[*sql.Tx], error) {
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
	return db, dialectSQLite, riversqlite.New(db), nil
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

// migrations are ours, applied after River's. Each entry runs once, in a
// transaction, and is recorded in autocapture_migrations. Times are Unix
// milliseconds (BIGINT), JSON is TEXT: the same DDL on both databases.
//
// 2: cooldowns become claims (autocapture_cooldowns, one row per key, taken
// atomically: see claimCooldown), seeded from the runs and steps that held them
// (the run id named is the key's newest, paired with its newest time only
// approximately); slot_generation marks the runs that hold their playbooks'
// max_concurrent slots (see playbookSlot), seeded from the runs executing now.
//
// 3: river_job_id, the job of the run's current generation (see enqueue), so
// the reaper's stranded check is a primary-key join instead of a search of
// every live job's args per queued run; filled for unfinished runs from the
// jobs' args (one pass over river_job).
//
// 4: indexes for the statements every replica runs all the time, which read
// whole tables before: the reaper's expired leases and the playbook slot count
// (runs_lease: unfinished runs only, so it stays as small as the work in
// flight), a resolution's run by fingerprint (inside the accept transaction),
// the list by alertname (newest first, the cursor's order).
//
// 6: autocapture_feedback, readers' answers to a run's verdict (the Slack
// buttons): one row per run and user, a change of mind overwrites it.
// correct is 0 or 1 (INTEGER on both databases).
//
// 7: autocapture_keys: keys the daemon generates once and every replica
// shares, by name; "link-signing" signs the artifact links in threads when
// web.link_secret is not set (see linkKey).
//
// 8: the run's manifest (manifest.go): manifest_key once it is written,
// manifest_seq bumped by every request to (re)write it, so a writer knows
// whether what it wrote is current; and the index retention's scan of old
// finished runs uses (retention.go).
//
// 9: autocapture_uploads, one row per artifact key spooled on a replica
// while the artifact store was down (see upload.go): state pending|uploaded,
// the stored size and sha256 the step recorded (to check what the store holds
// when the spool file is gone), attempts and the last error for the API. No
// foreign key to the run: the spool scan may find files of any run.
//
// 10 (groups, group.go): threads several runs share. autocapture_groups has a
// row per group keyed by its lead run (the run whose outbox and thread the
// group uses), with the outbox counter of that thread; group_lead on a run
// names its group. autocapture_fleets holds each (alertname, model, channel)
// key's open fleet, claimed in the Accept transaction.
//
// 11 (profiles, profile*.go): the tier-3 guard. autocapture_profile_leases
// has one row per target while a capture holds it (owner the replica, token
// the lease's own, so a process that lost it can change nothing), its state
// (vocab.LeaseHeld…), since/deadline of the recording, lease_until renewed
// by the owner, an operator's stop request, what the step saved, and why a
// stop failed. autocapture_profile_starts counts starts for max_per_hour and
// the per-target cooldown; autocapture_profile_pause is the one fleet-wide
// pause row (paused, who changed it last, when, why);
// autocapture_profile_reports keeps analyses for baselines;
// autocapture_profile_events is each lease's audit trail, shown on its run.
//
// 12 (verdicts, verdicts.go): autocapture_verdicts, a run's verdict history —
// each preliminary verdict (keyed by the evidence it read) and the refined
// one (key "refined") of a triage step, numbered n in the order recorded,
// written in the transaction of the thread operation that shows it.
var migrations = []string{`
CREATE TABLE autocapture_runs (
	id                  TEXT PRIMARY KEY,
	run_key             TEXT NOT NULL UNIQUE,
	fingerprint         TEXT NOT NULL,
	alertname           TEXT NOT NULL,
	alert               TEXT NOT NULL,
	starts_at           BIGINT NOT NULL,
	status              TEXT NOT NULL,
	reason              TEXT NOT NULL DEFAULT '',
	resolved_at         BIGINT,
	cancel_requested_at BIGINT,
	created_at          BIGINT NOT NULL,
	queued_at           BIGINT NOT NULL,
	started_at          BIGINT,
	finished_at         BIGINT,
	attempts            INTEGER NOT NULL DEFAULT 0,
	resumed             INTEGER NOT NULL DEFAULT 0,
	generation          INTEGER NOT NULL DEFAULT 0,
	owner               TEXT,
	lease_until         BIGINT,
	plans               TEXT,
	window_start        BIGINT,
	window_end          BIGINT,
	thread              TEXT,
	verdict             TEXT
);
CREATE UNIQUE INDEX autocapture_runs_open_fingerprint ON autocapture_runs (fingerprint) WHERE resolved_at IS NULL;
CREATE INDEX autocapture_runs_created ON autocapture_runs (created_at, id);
CREATE INDEX autocapture_runs_status ON autocapture_runs (status);
CREATE TABLE autocapture_run_playbooks (
	run_id       TEXT NOT NULL REFERENCES autocapture_runs (id) ON DELETE CASCADE,
	playbook     TEXT NOT NULL,
	cooldown_key TEXT NOT NULL DEFAULT '',
	created_at   BIGINT NOT NULL,
	PRIMARY KEY (run_id, playbook)
);
CREATE INDEX autocapture_run_playbooks_cooldown ON autocapture_run_playbooks (cooldown_key, created_at);
CREATE TABLE autocapture_steps (
	run_id       TEXT NOT NULL REFERENCES autocapture_runs (id) ON DELETE CASCADE,
	plan         TEXT NOT NULL,
	step_id      TEXT NOT NULL,
	kind         TEXT NOT NULL,
	status       TEXT NOT NULL,
	cooldown_key TEXT NOT NULL DEFAULT '',
	finished_at  BIGINT NOT NULL,
	record       TEXT NOT NULL,
	PRIMARY KEY (run_id, plan, step_id)
);
CREATE INDEX autocapture_steps_cooldown ON autocapture_steps (cooldown_key, finished_at);
`, `
CREATE TABLE autocapture_cooldowns (
	scope        TEXT NOT NULL,
	cooldown_key TEXT NOT NULL,
	run_id       TEXT NOT NULL,
	claimed_at   BIGINT NOT NULL,
	PRIMARY KEY (scope, cooldown_key)
);
INSERT INTO autocapture_cooldowns (scope, cooldown_key, run_id, claimed_at)
	SELECT 'playbook', cooldown_key, MAX(run_id), MAX(created_at) FROM autocapture_run_playbooks
	WHERE cooldown_key <> '' GROUP BY cooldown_key;
INSERT INTO autocapture_cooldowns (scope, cooldown_key, run_id, claimed_at)
	SELECT 'step', cooldown_key, MAX(run_id), MAX(finished_at) FROM autocapture_steps
	WHERE cooldown_key <> '' AND status = 'succeeded' GROUP BY cooldown_key;
ALTER TABLE autocapture_runs ADD COLUMN slot_generation INTEGER;
UPDATE autocapture_runs SET slot_generation = generation
	WHERE finished_at IS NULL AND owner IS NOT NULL AND plans IS NOT NULL;
`, `
ALTER TABLE autocapture_runs ADD COLUMN river_job_id BIGINT;
UPDATE autocapture_runs SET river_job_id = j.id FROM river_job j
	WHERE autocapture_runs.finished_at IS NULL AND j.kind = 'autocapture_run'
	AND j.args->>'run_id' = autocapture_runs.id
	AND CAST(j.args->>'generation' AS INTEGER) = autocapture_runs.generation;
`, `
CREATE INDEX autocapture_runs_lease ON autocapture_runs (lease_until) WHERE finished_at IS NULL;
CREATE INDEX autocapture_runs_fingerprint ON autocapture_runs (fingerprint, created_at);
CREATE INDEX autocapture_runs_alertname ON autocapture_runs (alertname, created_at, id);
`, `
ALTER TABLE autocapture_runs ADD COLUMN outbox_seq INTEGER NOT NULL DEFAULT 0;
CREATE TABLE autocapture_threads (
	run_id     TEXT NOT NULL REFERENCES autocapture_runs (id) ON DELETE CASCADE,
	sink       TEXT NOT NULL,
	thread     TEXT,
	pump_owner TEXT,
	pump_until BIGINT,
	PRIMARY KEY (run_id, sink)
);
CREATE TABLE autocapture_outbox (
	run_id       TEXT NOT NULL REFERENCES autocapture_runs (id) ON DELETE CASCADE,
	sink         TEXT NOT NULL,
	seq          INTEGER NOT NULL,
	op           TEXT NOT NULL,
	op_key       TEXT NOT NULL,
	ref          TEXT NOT NULL DEFAULT '',
	created_at   BIGINT NOT NULL,
	attempts     INTEGER NOT NULL DEFAULT 0,
	last_error   TEXT NOT NULL DEFAULT '',
	delivered_at BIGINT,
	PRIMARY KEY (run_id, sink, seq)
);
CREATE UNIQUE INDEX autocapture_outbox_key ON autocapture_outbox (run_id, sink, op_key);
CREATE INDEX autocapture_outbox_pending ON autocapture_outbox (created_at) WHERE delivered_at IS NULL;
`, `
CREATE TABLE autocapture_feedback (
	run_id    TEXT NOT NULL REFERENCES autocapture_runs (id) ON DELETE CASCADE,
	user_id   TEXT NOT NULL,
	user_name TEXT NOT NULL DEFAULT '',
	verdict   TEXT NOT NULL,
	correct   INTEGER NOT NULL,
	at        BIGINT NOT NULL,
	PRIMARY KEY (run_id, user_id)
);
`, `
CREATE TABLE autocapture_keys (
	name  TEXT PRIMARY KEY,
	value TEXT NOT NULL
);
`, `
ALTER TABLE autocapture_runs ADD COLUMN manifest_key TEXT;
ALTER TABLE autocapture_runs ADD COLUMN manifest_seq INTEGER NOT NULL DEFAULT 0;
CREATE INDEX autocapture_runs_finished ON autocapture_runs (finished_at) WHERE finished_at IS NOT NULL;
`, `
CREATE TABLE autocapture_uploads (
	object_key  TEXT PRIMARY KEY,
	run_id      TEXT NOT NULL,
	replica     TEXT NOT NULL,
	size        BIGINT NOT NULL,
	sha256      TEXT NOT NULL,
	state       TEXT NOT NULL,
	attempts    INTEGER NOT NULL DEFAULT 0,
	last_error  TEXT NOT NULL DEFAULT '',
	created_at  BIGINT NOT NULL,
	uploaded_at BIGINT
);
CREATE INDEX autocapture_uploads_run ON autocapture_uploads (run_id, state);
CREATE INDEX autocapture_uploads_replica ON autocapture_uploads (replica, state);
`, `
CREATE TABLE autocapture_groups (
	lead_run   TEXT PRIMARY KEY REFERENCES autocapture_runs (id) ON DELETE CASCADE,
	kind       TEXT NOT NULL,
	channel    TEXT NOT NULL DEFAULT '',
	opened_at  BIGINT NOT NULL,
	outbox_seq INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE autocapture_fleets (
	fleet_key TEXT PRIMARY KEY,
	lead_run  TEXT NOT NULL,
	opened_at BIGINT NOT NULL
);
ALTER TABLE autocapture_runs ADD COLUMN group_lead TEXT;
CREATE INDEX autocapture_runs_group ON autocapture_runs (group_lead, created_at, id) WHERE group_lead IS NOT NULL;
`, `
CREATE TABLE autocapture_profile_leases (
	target            TEXT PRIMARY KEY,
	run_id            TEXT NOT NULL,
	plan              TEXT NOT NULL,
	step_id           TEXT NOT NULL,
	owner             TEXT NOT NULL,
	token             TEXT NOT NULL,
	state             TEXT NOT NULL,
	acquired_at       BIGINT NOT NULL,
	since             BIGINT,
	deadline          BIGINT,
	lease_until       BIGINT NOT NULL,
	stop_requested_at BIGINT,
	stop_requested_by TEXT NOT NULL DEFAULT '',
	stop_attempts     INTEGER NOT NULL DEFAULT 0,
	saved             TEXT,
	reason            TEXT NOT NULL DEFAULT ''
);
CREATE INDEX autocapture_profile_leases_run ON autocapture_profile_leases (run_id);
CREATE INDEX autocapture_profile_leases_until ON autocapture_profile_leases (lease_until);
CREATE TABLE autocapture_profile_starts (
	target     TEXT NOT NULL,
	run_id     TEXT NOT NULL,
	plan       TEXT NOT NULL,
	step_id    TEXT NOT NULL,
	started_at BIGINT NOT NULL
);
CREATE INDEX autocapture_profile_starts_at ON autocapture_profile_starts (started_at);
CREATE INDEX autocapture_profile_starts_target ON autocapture_profile_starts (target, started_at);
CREATE INDEX autocapture_profile_starts_run ON autocapture_profile_starts (run_id);
CREATE TABLE autocapture_profile_pause (
	id         INTEGER PRIMARY KEY,
	paused     INTEGER NOT NULL,
	changed_by TEXT NOT NULL DEFAULT '',
	changed_at BIGINT NOT NULL DEFAULT 0,
	reason     TEXT NOT NULL DEFAULT ''
);
INSERT INTO autocapture_profile_pause (id, paused) VALUES (1, 0);
CREATE TABLE autocapture_profile_reports (
	report_key TEXT NOT NULL,
	run_id     TEXT NOT NULL,
	target     TEXT NOT NULL,
	baseline   INTEGER NOT NULL,
	taken_at   BIGINT NOT NULL,
	report     TEXT NOT NULL,
	PRIMARY KEY (report_key, run_id)
);
CREATE INDEX autocapture_profile_reports_run ON autocapture_profile_reports (run_id);
CREATE TABLE autocapture_profile_events (
	run_id TEXT NOT NULL,
	seq    INTEGER NOT NULL,
	target TEXT NOT NULL,
	at     BIGINT NOT NULL,
	actor  TEXT NOT NULL,
	event  TEXT NOT NULL,
	detail TEXT NOT NULL DEFAULT ''
);
CREATE INDEX autocapture_profile_events_run ON autocapture_profile_events (run_id, seq);
`, `
CREATE TABLE autocapture_verdicts (
	run_id      TEXT NOT NULL REFERENCES autocapture_runs (id) ON DELETE CASCADE,
	plan        TEXT NOT NULL,
	step_id     TEXT NOT NULL,
	verdict_key TEXT NOT NULL,
	n           INTEGER NOT NULL,
	kind        TEXT NOT NULL,
	at          BIGINT NOT NULL,
	record      TEXT NOT NULL,
	PRIMARY KEY (run_id, plan, step_id, verdict_key)
);
CREATE INDEX autocapture_verdicts_run ON autocapture_verdicts (run_id, n);
`}

// migrate applies River's migrations, then ours. On PostgreSQL, replicas that
// start together take turns: a session lock on one connection covers River's
// migrations too (its migrator takes no lock of its own).
//
// It may be run again after it failed part way (a start retries it while
// PostgreSQL is away, see startup): River's migrator applies each of its
// migrations in a transaction of its own together with its river_migration
// row (rivermigrate v0.51.2, applyMigrations) and ours go in one
// transaction with their autocapture_migrations rows, so a session killed
// mid-way leaves each migration applied whole or not at all, and the next
// run starts at the first one not recorded. The session lock dies with its
// session.
func migrate(ctx context.Context, db *sql.DB, d dialect, drv riverdriver.Driver[*sql.Tx]) error {
	if d == dialectPostgres {
		conn, err := db.Conn(ctx)
		if err != nil {
			return fmt.Errorf("runner: migrations: connect: %w", err)
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock(727000)`); err != nil {
			return fmt.Errorf("runner: migrations: lock: %w", err)
		}
		defer conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(727000)`)
	}
	m, err := rivermigrate.New(drv, nil)
	if err != nil {
		return fmt.Errorf("runner: river migrator: %w", err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("runner: river migrations: %w", err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("runner: migrations: begin: %w", err)
	}
	defer tx.Rollback()
	if d == dialectPostgres { // replicas starting together take turns
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(727001)`); err != nil {
			return fmt.Errorf("runner: migrations: lock: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS autocapture_migrations (version INTEGER PRIMARY KEY)`); err != nil {
		return fmt.Errorf("runner: migrations: create table: %w", err)
	}
	var have int
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM autocapture_migrations`).Scan(&have); err != nil {
		return fmt.Errorf("runner: migrations: read version: %w", err)
	}
	for v := have + 1; v <= len(migrations); v++ {
		for _, stmt := range strings.Split(migrations[v-1], ";") {
			if strings.TrimSpace(stmt) == "" {
				continue
			}
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("runner: migration %d: %w", v, err)
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO autocapture_migrations (version) VALUES ($1)`, v); err != nil {
			return fmt.Errorf("runner: migration %d: record: %w", v, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("runner: migrations: commit: %w", err)
	}
	return nil
}
