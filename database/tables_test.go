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

// TestProfileStartStall: a capture's stall lands on its step's latest start
// on that target; the target's last stall is the latest measured capture's,
// an unmeasured later one does not hide it, and another target's is apart.
func TestProfileStartStall(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *sql.DB, tb Tables) {
		ctx := context.Background()
		s := tb.ProfileStarts
		if _, _, ok, err := s.LastStall(ctx, db, "http://a:1"); ok || err != nil {
			t.Fatalf("empty: ok %v err %v", ok, err)
		}
		for _, st := range []struct {
			target, run string
			at          int64
		}{{"http://a:1", "r1", 1000}, {"http://a:1", "r1", 2000}, {"http://a:1", "r2", 3000}, {"http://b:1", "r3", 4000}} {
			if err := s.Add(ctx, db, st.target, st.run, "pb", "profile", st.at); err != nil {
				t.Fatal(err)
			}
		}
		if ok, err := s.SetStall(ctx, db, "r1", "pb", "profile", "http://a:1", 2500); !ok || err != nil {
			t.Fatalf("set r1: %v %v", ok, err)
		}
		if ok, err := s.SetStall(ctx, db, "r9", "pb", "profile", "http://a:1", 1); ok || err != nil {
			t.Fatalf("set a run without a start: %v %v, want false", ok, err)
		}
		stall, at, ok, err := s.LastStall(ctx, db, "http://a:1")
		if err != nil || !ok || stall != 2500 || at != 2000 {
			t.Fatalf("last stall %d at %d (%v %v): want r1's latest start (2000) with 2500 ms, r2 unmeasured", stall, at, ok, err)
		}
		if _, err := s.SetStall(ctx, db, "r3", "pb", "profile", "http://b:1", 100); err != nil {
			t.Fatal(err)
		}
		if stall, _, _, _ := s.LastStall(ctx, db, "http://a:1"); stall != 2500 {
			t.Errorf("another target's stall leaked: %d", stall)
		}
		if _, err := s.SetStall(ctx, db, "r2", "pb", "profile", "http://a:1", 0); err != nil {
			t.Fatal(err)
		}
		if stall, at, _, _ := s.LastStall(ctx, db, "http://a:1"); stall != 0 || at != 3000 {
			t.Errorf("last stall %d at %d: want r2's 0 at 3000", stall, at)
		}
	})
}
