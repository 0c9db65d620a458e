package database

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivermigrate"
)

// The migrations are ours, applied after River's: migrations/NNN_name.sql,
// numbered from 001 without gaps, each run once, in a transaction, and
// recorded in autocapture_migrations under its number. Times are Unix
// milliseconds (BIGINT), JSON is TEXT: the same DDL on both databases so far.
// A migration whose text must differ between them is two files,
// NNN_name.sqlite.sql and NNN_name.postgres.sql, in place of NNN_name.sql.
//
// Each file starts with a header comment (lines starting with --) telling
// why the migration was made; the rest are statements separated by ";" (no
// comments among them: the header is dropped before the split).
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migration is one of ours, as applied on one dialect.
type Migration struct {
	Version int    // its number, recorded in autocapture_migrations
	Name    string // the file's name
	SQL     string // the file's text, header included
}

// Statements are the migration's statements in order, without its header.
func (m Migration) Statements() []string {
	var body strings.Builder
	for _, line := range strings.SplitAfter(m.SQL, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			body.WriteString(line)
		}
	}
	var out []string
	for _, stmt := range strings.Split(body.String(), ";") {
		if strings.TrimSpace(stmt) != "" {
			out = append(out, stmt)
		}
	}
	return out
}

var migrationName = regexp.MustCompile(`^(\d{3})_([a-z0-9_]+?)(?:\.(sqlite|postgres))?\.sql$`)

// loadMigrations reads the embedded files for dialect d.
func loadMigrations(files fs.FS, d Dialect) ([]Migration, error) {
	entries, err := fs.ReadDir(files, "migrations")
	if err != nil {
		return nil, err
	}
	common := map[int]string{}
	own := map[int]string{}
	others := map[int]string{}
	for _, e := range entries {
		m := migrationName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("database: migration file %s: want NNN_name.sql or NNN_name.{sqlite,postgres}.sql", e.Name())
		}
		v, _ := strconv.Atoi(m[1])
		switch {
		case m[3] == "":
			common[v] = e.Name()
		case Dialect(m[3]) == d:
			own[v] = e.Name()
		default:
			others[v] = e.Name()
		}
	}
	var out []Migration
	for v := 1; len(common)+len(own)+len(others) > 0; v++ {
		name, ok := own[v]
		switch {
		case ok && common[v] != "":
			return nil, fmt.Errorf("database: migration %d: both %s and %s", v, common[v], name)
		case !ok:
			name = common[v]
		}
		if name == "" {
			return nil, fmt.Errorf("database: migration %d: no file for %s (versions must run from 001 without gaps)", v, d)
		}
		if common[v] != "" && others[v] != "" {
			return nil, fmt.Errorf("database: migration %d: both %s and %s", v, common[v], others[v])
		}
		delete(common, v)
		delete(own, v)
		delete(others, v)
		text, err := fs.ReadFile(files, "migrations/"+name)
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: name, SQL: string(text)})
	}
	return out, nil
}

var sqliteMigrations, postgresMigrations = mustLoad(SQLite), mustLoad(Postgres)

func mustLoad(d Dialect) []Migration {
	m, err := loadMigrations(migrationFiles, d)
	if err != nil {
		panic(err)
	}
	return m
}

// Migrations are ours for dialect d, in the order they apply.
func Migrations(d Dialect) []Migration {
	if d == Postgres {
		return slices.Clone(postgresMigrations)
	}
	return slices.Clone(sqliteMigrations)
}

// Latest is the number of our newest migration.
func Latest() int { return len(sqliteMigrations) }

// Migrate applies River's migrations, then ours. On PostgreSQL, replicas that
// start together take turns: a session lock on one connection covers River's
// migrations too (its migrator takes no lock of its own).
//
// It may be run again after it failed part way (a start retries it while
// PostgreSQL is away, see the runner's startup): River's migrator applies
// each of its migrations in a transaction of its own together with its
// river_migration row (rivermigrate v0.51.2, applyMigrations) and ours go in
// one transaction with their autocapture_migrations rows, so a session killed
// mid-way leaves each migration applied whole or not at all, and the next
// run starts at the first one not recorded. The session lock dies with its
// session.
func Migrate(ctx context.Context, db *sql.DB, d Dialect, drv riverdriver.Driver[*sql.Tx]) error {
	if d == Postgres {
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
	if d == Postgres { // replicas starting together take turns
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
	for _, mig := range Migrations(d) {
		if mig.Version <= have {
			continue
		}
		for _, stmt := range mig.Statements() {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("runner: migration %d: %w", mig.Version, err)
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO autocapture_migrations (version) VALUES ($1)`, mig.Version); err != nil {
			return fmt.Errorf("runner: migration %d: record: %w", mig.Version, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("runner: migrations: commit: %w", err)
	}
	return nil
}

// Recorded counts our migrations recorded in autocapture_migrations: a read
// that answers only while the store does (the runner's readiness check).
func Recorded(ctx context.Context, q RowQuerier) (int, error) {
	var n int
	err := q.QueryRowContext(ctx, `SELECT COUNT(*) FROM autocapture_migrations`).Scan(&n)
	return n, err
}
