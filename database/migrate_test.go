package database

import (
	"context"
	"database/sql"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivermigrate"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestMigrationFiles checks the embedded files: numbered from 1 without gaps
// on both dialects, each with a header comment saying why, and statements.
func TestMigrationFiles(t *testing.T) {
	for _, d := range []Dialect{SQLite, Postgres} {
		ms := Migrations(d)
		if len(ms) != Latest() {
			t.Errorf("%s: %d migrations, want %d", d, len(ms), Latest())
		}
		for i, m := range ms {
			if m.Version != i+1 {
				t.Errorf("%s: migration %d is numbered %d", d, i+1, m.Version)
			}
			if !strings.HasPrefix(m.SQL, "-- ") {
				t.Errorf("%s: %s has no header comment", d, m.Name)
			}
			if len(m.Statements()) == 0 {
				t.Errorf("%s: %s has no statements", d, m.Name)
			}
			for _, stmt := range m.Statements() {
				if strings.Contains(stmt, "--") {
					t.Errorf("%s: %s: a comment among the statements: %q", d, m.Name, stmt)
				}
			}
		}
	}
	// 12 when the files were moved out of the Go slice: databases migrated
	// before then record versions 1..12 and must find the same numbers.
	if Latest() < 12 {
		t.Errorf("Latest() = %d, want at least the 12 migrations of the old slice", Latest())
	}
}

// TestLoadMigrations checks per-dialect files and the loader's refusals.
func TestLoadMigrations(t *testing.T) {
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	fsys := fstest.MapFS{
		"migrations/001_a.sql":          file("-- a; b\nCREATE TABLE a (x INTEGER);\n"),
		"migrations/002_b.sqlite.sql":   file("-- b\nSELECT 'sqlite';\n"),
		"migrations/002_b.postgres.sql": file("-- b\nSELECT 'postgres';\n"),
	}
	for _, d := range []Dialect{SQLite, Postgres} {
		ms, err := loadMigrations(fsys, d)
		if err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		if len(ms) != 2 || ms[1].Name != "002_b."+string(d)+".sql" {
			t.Fatalf("%s: loaded %+v", d, ms)
		}
		if got := ms[0].Statements(); len(got) != 1 || strings.TrimSpace(got[0]) != "CREATE TABLE a (x INTEGER)" {
			t.Errorf("%s: statements %q: the header's ';' must not split it", d, got)
		}
		if got := ms[1].Statements(); len(got) != 1 || !strings.Contains(got[0], string(d)) {
			t.Errorf("%s: statements %q, want its own dialect's", d, got)
		}
	}
	for name, bad := range map[string]fstest.MapFS{
		"gap":           {"migrations/001_a.sql": file("SELECT 1"), "migrations/003_c.sql": file("SELECT 1")},
		"one dialect":   {"migrations/001_a.postgres.sql": file("SELECT 1")},
		"both kinds":    {"migrations/001_a.sql": file("SELECT 1"), "migrations/001_a.sqlite.sql": file("SELECT 1")},
		"both, other":   {"migrations/001_a.sql": file("SELECT 1"), "migrations/001_a.postgres.sql": file("SELECT 1")},
		"unnumbered":    {"migrations/a.sql": file("SELECT 1")},
		"not two zeros": {"migrations/1_a.sql": file("SELECT 1")},
	} {
		if _, err := loadMigrations(bad, SQLite); err == nil {
			t.Errorf("%s: loaded, want an error", name)
		}
	}
}

// TestMigrate applies River's migrations and ours on SQLite and PostgreSQL,
// then again (as every start does): the second run changes nothing.
func TestMigrate(t *testing.T) {
	for _, tc := range []struct{ name, url, path string }{
		{name: "sqlite", path: filepath.Join(t.TempDir(), "store.db")},
		{name: "postgres"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := tc.url
			if tc.name == "postgres" {
				url = testenv.StartPostgres(t)
			}
			db, d, drv, err := Open(url, tc.path)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if string(d) != tc.name {
				t.Fatalf("dialect %s, want %s", d, tc.name)
			}
			ctx := context.Background()
			for pass := 1; pass <= 2; pass++ {
				if err := Migrate(ctx, db, d, drv); err != nil {
					t.Fatalf("pass %d: %v", pass, err)
				}
				var n, top int
				if err := db.QueryRowContext(ctx, `SELECT COUNT(*), MAX(version) FROM autocapture_migrations`).Scan(&n, &top); err != nil {
					t.Fatal(err)
				}
				if n != Latest() || top != Latest() {
					t.Fatalf("pass %d: %d migrations recorded up to %d, want %d", pass, n, top, Latest())
				}
			}
			for _, table := range []string{"autocapture_runs", "autocapture_outbox", "autocapture_keys",
				"autocapture_uploads", "autocapture_groups", "autocapture_profile_leases", "autocapture_verdicts", "river_job"} {
				var n int
				if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+table).Scan(&n); err != nil {
					t.Errorf("%s: %v", table, err)
				}
			}
			var paused int
			if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM autocapture_profile_pause`).Scan(&paused); err != nil || paused != 1 {
				t.Errorf("profile pause rows: %d (%v), want the one seeded once", paused, err)
			}
			now, err := d.Now(ctx, db)
			if err != nil || now <= 0 {
				t.Errorf("database clock: %d (%v)", now, err)
			}
		})
	}
}

// migrateOld applies oldMigrations up to version upTo the way the old code
// did (after River's migrations, one transaction, a row per version).
func migrateOld(t *testing.T, db *sql.DB, d Dialect, upTo int) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS autocapture_migrations (version INTEGER PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	for v := 1; v <= upTo; v++ {
		for _, stmt := range strings.Split(oldMigrations[v-1], ";") {
			if strings.TrimSpace(stmt) == "" {
				continue
			}
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				t.Fatalf("old migration %d: %v", v, err)
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO autocapture_migrations (version) VALUES ($1)`, v); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// schema describes our tables and indexes as the database reports them.
func schema(t *testing.T, db *sql.DB, d Dialect) []string {
	t.Helper()
	queries := []string{`SELECT type || ' ' || name || ': ' || COALESCE(sql, '') FROM sqlite_master
		WHERE name LIKE 'autocapture_%' ORDER BY name`}
	if d == Postgres {
		queries = []string{
			`SELECT table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable || ' ' || COALESCE(column_default, '')
				FROM information_schema.columns WHERE table_schema = current_schema() AND table_name LIKE 'autocapture_%'
				ORDER BY table_name, column_name`,
			`SELECT indexname || ': ' || indexdef FROM pg_indexes
				WHERE schemaname = current_schema() AND tablename LIKE 'autocapture_%' ORDER BY indexname`,
		}
	}
	var out []string
	for _, q := range queries {
		rows, err := db.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			out = append(out, line)
		}
		rows.Close()
	}
	return out
}

// TestMigrateAcceptsTheOldSlice: a database the old code migrated (all of
// its slice, or part of it) is taken as it is: the same version numbers,
// only the missing ones applied, and the schema a fresh database gets.
func TestMigrateAcceptsTheOldSlice(t *testing.T) {
	if len(oldMigrations) != 12 {
		t.Fatalf("old slice: %d migrations, want 12", len(oldMigrations))
	}
	for _, name := range []string{"sqlite", "postgres"} {
		t.Run(name, func(t *testing.T) {
			open := func() (*sql.DB, Dialect, riverdriver.Driver[*sql.Tx]) {
				t.Helper()
				url, path := "", filepath.Join(t.TempDir(), "store.db")
				if name == "postgres" {
					url = testenv.StartPostgres(t)
				}
				db, d, drv, err := Open(url, path)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { db.Close() })
				return db, d, drv
			}
			ctx := context.Background()
			fresh, d, drv := open()
			if err := Migrate(ctx, fresh, d, drv); err != nil {
				t.Fatal(err)
			}
			want := schema(t, fresh, d)
			if len(want) == 0 {
				t.Fatal("no schema read")
			}
			for _, upTo := range []int{12, 9} {
				db, d, drv := open()
				m, err := rivermigrate.New(drv, nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
					t.Fatal(err)
				}
				migrateOld(t, db, d, upTo)
				if err := Migrate(ctx, db, d, drv); err != nil {
					t.Fatalf("old slice up to %d: %v", upTo, err)
				}
				var n, top int
				if err := db.QueryRow(`SELECT COUNT(*), MAX(version) FROM autocapture_migrations`).Scan(&n, &top); err != nil {
					t.Fatal(err)
				}
				if n != Latest() || top != Latest() {
					t.Errorf("old slice up to %d: %d versions up to %d, want %d", upTo, n, top, Latest())
				}
				if got := schema(t, db, d); !slices.Equal(got, want) {
					t.Errorf("old slice up to %d: schema differs from a fresh database's:\n%s\nwant:\n%s",
						upTo, strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
			}
		})
	}
}
