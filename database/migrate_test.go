package database

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/autocapture/autocapture/internal/testenv"
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
