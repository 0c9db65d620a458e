package database

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
)

// forEachDialect runs f on a migrated store of each dialect.
func forEachDialect(t *testing.T, f func(t *testing.T, db *sql.DB, tables Tables)) {
	for _, name := range []string{"sqlite", "postgres"} {
		t.Run(name, func(t *testing.T) {
			url, path := "", filepath.Join(t.TempDir(), "store.db")
			if name == "postgres" {
				url = testenv.StartPostgres(t)
			}
			db, d, drv, err := Open(url, path)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if err := Migrate(context.Background(), db, d, drv); err != nil {
				t.Fatal(err)
			}
			f(t, db, NewTables(d))
		})
	}
}

// TestProfileReports: a baseline is preferred over a later report, a report
// without a time is stamped with the database's clock, and a run's report
// for a key is replaced.
func TestProfileReports(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *sql.DB, tb Tables) {
		ctx := context.Background()
		r := tb.ProfileReports
		if _, err := r.Baseline(ctx, db, "k"); !errors.Is(err, sql.ErrNoRows) {
			t.Fatalf("empty: %v, want sql.ErrNoRows", err)
		}
		put := func(rep ProfileReport) {
			t.Helper()
			if err := r.Put(ctx, db, rep); err != nil {
				t.Fatal(err)
			}
		}
		put(ProfileReport{Key: "k", RunID: "a", Target: "t", Baseline: true, TakenAt: sql.NullInt64{Int64: 1000, Valid: true}, Report: "A"})
		put(ProfileReport{Key: "k", RunID: "b", Target: "t", Report: "B"}) // now: later than a's
		got, err := r.Baseline(ctx, db, "k")
		if err != nil || got.RunID != "a" || !got.Baseline || got.Report != "A" || got.TakenAt.Int64 != 1000 {
			t.Fatalf("baseline: %+v (%v), want run a's", got, err)
		}
		put(ProfileReport{Key: "k", RunID: "a", Target: "t", TakenAt: sql.NullInt64{Int64: 2000, Valid: true}, Report: "A2"})
		got, err = r.Baseline(ctx, db, "k")
		now, _ := tb.Runs.d.Now(ctx, db)
		if err != nil || got.RunID != "b" || got.Baseline || got.TakenAt.Int64 < 2000 || got.TakenAt.Int64 > now {
			t.Fatalf("after a is no baseline: %+v (%v), want run b's, stamped before %d", got, err, now)
		}
	})
}

// TestKeysOfferOnce: the first key offered under a name stays.
func TestKeysOfferOnce(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *sql.DB, tb Tables) {
		ctx := context.Background()
		for _, v := range []string{"first", "second"} {
			if err := tb.Keys.Offer(ctx, db, "n", v); err != nil {
				t.Fatal(err)
			}
		}
		if v, err := tb.Keys.Get(ctx, db, "n"); err != nil || v != "first" {
			t.Fatalf("key: %q (%v), want first", v, err)
		}
	})
}
