package artifacts

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vocab"
)

// forEachArtifactStore runs f on a Local folder and on a real S3 server
// (versitygw, started by internal/testkit/testenv).
func forEachArtifactStore(t *testing.T, f func(t *testing.T, st vocab.Store)) {
	t.Run("local", func(t *testing.T) {
		f(t, newLocalStore(t))
	})
	t.Run("s3", func(t *testing.T) {
		srv := testenv.StartVersityGW(t)
		st, err := storage.NewS3(context.Background(), storage.S3Options{Bucket: srv.Bucket, Prefix: "retention",
			Region: srv.Region, Endpoint: srv.Endpoint, PathStyle: true,
			AccessKeyID: srv.AccessKeyID, SecretAccessKey: srv.SecretAccessKey})
		if err != nil {
			t.Fatal(err)
		}
		f(t, st)
	})
}

const month = 30 * 24 * time.Hour

// retentionRun is one run of the fixture: its id and when it was created.
type retentionRun struct {
	id      string
	created time.Time
}

// retentionFixture is three runs: old (finished, then backdated past the
// cutoff), young (finished now) and unfinished (old, but still running),
// each with objects under its folder; the finished ones with a step's
// artifact and their manifest, the old one with rows in other tables too.
type retentionFixture struct {
	h                      *harness
	old, young, unfinished retentionRun
}

// newRetentionFixture builds the fixture on a Keeper that deletes runs older
// than a month (artifacts: the retention.artifacts mode); start: its River
// client runs (and with it the periodic pass).
func newRetentionFixture(t *testing.T, db testenv.DB, st vocab.Store, artifacts string, start bool) *retentionFixture {
	t.Helper()
	ctx := context.Background()
	h := newHarness(t, db, st, start, func(d *Deps) {
		d.Retention = config.Retention{Runs: config.Age(month), Artifacts: artifacts, Interval: time.Hour}
	})
	at := time.Now().Add(-time.Minute)
	f := &retentionFixture{h: h, old: retentionRun{"run-old", at}, young: retentionRun{"run-young", at},
		unfinished: retentionRun{"run-unfinished", at}}
	for _, r := range []retentionRun{f.old, f.young} {
		h.finishedRun(t, r.id, r.created, "evidence\n")
		if err := h.k.WriteManifest(ctx, r.id); err != nil {
			t.Fatal(err)
		}
	}
	h.addRun(t, f.unfinished.id, "running", at)
	if _, err := st.Put(ctx, artifactKey(f.unfinished.id, at, "early", "early.txt"), strings.NewReader("early\n"),
		vocab.ObjectMeta{}); err != nil {
		t.Fatal(err)
	}
	// The old run's thread and a late upload: rows of other tables of it.
	for _, q := range []string{
		`INSERT INTO autocapture_threads (run_id, sink) VALUES ($1, 'default')`,
		`INSERT INTO autocapture_outbox (run_id, sink, seq, op, op_key, created_at) VALUES ($1, 'default', 1, 'open', 'open', 0)`,
		`INSERT INTO autocapture_uploads (object_key, run_id, replica, size, sha256, state, created_at)
			VALUES ('k/' || $1, $1, 'r0', 1, 'x', 'uploaded', 0)`,
	} {
		if _, err := h.db.ExecContext(ctx, q, f.old.id); err != nil {
			t.Fatal(err)
		}
	}
	// The old and the unfinished run are 40 days old on the database's clock.
	back := (40 * 24 * time.Hour).Milliseconds()
	if _, err := h.db.ExecContext(ctx, `UPDATE autocapture_runs SET finished_at = finished_at - $1 WHERE id = $2`,
		back, f.old.id); err != nil {
		t.Fatal(err)
	}
	if _, err := h.db.ExecContext(ctx, `UPDATE autocapture_runs SET created_at = created_at - $1, queued_at = queued_at - $1
		WHERE id = $2`, back, f.unfinished.id); err != nil {
		t.Fatal(err)
	}
	return f
}

// objects lists the keys under the run's folder.
func (f *retentionFixture) objects(t *testing.T, r retentionRun) []string {
	t.Helper()
	var keys []string
	if err := f.h.store.List(context.Background(), storage.RunPrefix(r.created.UTC(), "VLLMSlowTTFT", r.id),
		func(e vocab.ListEntry) error {
			keys = append(keys, e.Key)
			return nil
		}); err != nil {
		t.Fatal(err)
	}
	return keys
}

// rowsOf counts the run's rows in every table keyed by it.
func (f *retentionFixture) rowsOf(t *testing.T, id string) int {
	t.Helper()
	n := 0
	for _, table := range append([]string{"autocapture_runs"}, database.RunTables...) {
		col := "run_id"
		if table == "autocapture_runs" {
			col = "id"
		}
		var c int
		if err := f.h.db.QueryRowContext(context.Background(), `SELECT COUNT(*) FROM `+table+` WHERE `+col+` = $1`, id).Scan(&c); err != nil {
			t.Fatal(err)
		}
		n += c
	}
	return n
}

// exists says whether run id has its row.
func (f *retentionFixture) exists(t *testing.T, id string) bool {
	t.Helper()
	ok, err := f.h.tables.Runs.Exists(context.Background(), f.h.db, id)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestRetentionDeletesOnlyOldFinishedRuns: the old run's rows and objects
// (its artifact and its manifest) go; the young run and the old unfinished
// one keep theirs.
func TestRetentionDeletesOnlyOldFinishedRuns(t *testing.T) {
	t.Parallel()
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		forEachArtifactStore(t, func(t *testing.T, st vocab.Store) {
			f := newRetentionFixture(t, db, st, config.RetainArtifactsDelete, false)
			k := f.h.k
			oldObjects, youngObjects := f.objects(t, f.old), f.objects(t, f.young)
			if len(oldObjects) != 2 || len(youngObjects) != 2 || f.rowsOf(t, f.old.id) < 5 {
				t.Fatalf("fixture: old %v, young %v, old rows %d; want an artifact and a manifest each",
					oldObjects, youngObjects, f.rowsOf(t, f.old.id))
			}
			if n, err := k.RetentionOnce(context.Background()); err != nil || n != 1 {
				t.Fatalf("retention deleted %d runs, %v; want 1", n, err)
			}
			if f.exists(t, f.old.id) {
				t.Error("old run still stored")
			}
			if rows := f.rowsOf(t, f.old.id); rows != 0 {
				t.Errorf("old run left %d rows", rows)
			}
			if keys := f.objects(t, f.old); len(keys) != 0 {
				t.Errorf("old run left objects %v", keys)
			}
			if keys := f.objects(t, f.young); len(keys) != 2 {
				t.Errorf("young run's objects = %v, want its 2", keys)
			}
			if keys := f.objects(t, f.unfinished); len(keys) != 1 {
				t.Errorf("unfinished run's objects = %v, want its 1", keys)
			}
			for _, r := range []retentionRun{f.young, f.unfinished} {
				if !f.exists(t, r.id) {
					t.Errorf("run %s deleted", r.id)
				}
			}
			if got := testutil.ToFloat64(k.Metrics().RetentionDeleted.WithLabelValues("runs")); got != 1 {
				t.Errorf("deleted_total{kind=runs} = %v, want 1", got)
			}
			if got := testutil.ToFloat64(k.Metrics().RetentionDeleted.WithLabelValues("objects")); got != 2 {
				t.Errorf("deleted_total{kind=objects} = %v, want 2", got)
			}
			if n, err := k.RetentionOnce(context.Background()); n != 0 || err != nil {
				t.Errorf("a second tick deleted %d, %v; want nothing", n, err)
			}
		})
	})
}

// TestRetentionWithBucketLifecycleKeepsObjects: artifacts: bucket deletes
// rows only; the objects are the lifecycle rule's.
func TestRetentionWithBucketLifecycleKeepsObjects(t *testing.T) {
	t.Parallel()
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		forEachArtifactStore(t, func(t *testing.T, st vocab.Store) {
			f := newRetentionFixture(t, db, st, config.RetainArtifactsBucket, false)
			if n, err := f.h.k.RetentionOnce(context.Background()); err != nil || n != 1 {
				t.Fatalf("retention deleted %d runs, %v; want 1", n, err)
			}
			if rows := f.rowsOf(t, f.old.id); rows != 0 {
				t.Errorf("old run left %d rows", rows)
			}
			if keys := f.objects(t, f.old); len(keys) != 2 {
				t.Errorf("old run's objects = %v, want both kept for the lifecycle rule", keys)
			}
		})
	})
}

// TestRetentionAfterACrashBetweenObjectsAndRows: a kill -9 after a run's
// objects went but before its rows did leaves the rows; the next tick
// deletes the (now missing) objects again without error, then the rows.
func TestRetentionAfterACrashBetweenObjectsAndRows(t *testing.T) {
	t.Parallel()
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		forEachArtifactStore(t, func(t *testing.T, st vocab.Store) {
			f := newRetentionFixture(t, db, st, config.RetainArtifactsDelete, false)
			k := f.h.k
			ctx := context.Background()
			batch, err := k.OldRuns(ctx, month.Milliseconds(), nil)
			if err != nil || len(batch) != 1 || batch[0].ID != f.old.id {
				t.Fatalf("old runs = %+v, %v; want the old run only", batch, err)
			}
			if err := k.DeleteRunObjects(ctx, batch[0]); err != nil { // then the process dies
				t.Fatal(err)
			}
			if keys := f.objects(t, f.old); len(keys) != 0 || f.rowsOf(t, f.old.id) == 0 {
				t.Fatalf("after the objects: %v left, %d rows", keys, f.rowsOf(t, f.old.id))
			}
			if n, err := k.RetentionOnce(ctx); err != nil || n != 1 {
				t.Fatalf("the next tick deleted %d runs, %v; want 1 without error", n, err)
			}
			if rows := f.rowsOf(t, f.old.id); rows != 0 {
				t.Errorf("old run left %d rows", rows)
			}
			if got := testutil.ToFloat64(k.Metrics().RetentionErrors); got != 0 {
				t.Errorf("errors_total = %v, want 0 (a missing key is not an error)", got)
			}
		})
	})
}

// TestRetentionRunsOnTheLeader: with retention on, River's leader inserts
// the periodic job at start and it deletes an old run without a direct call.
func TestRetentionRunsOnTheLeader(t *testing.T) {
	t.Parallel()
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		f := newRetentionFixture(t, db, newLocalStore(t), config.RetainArtifactsDelete, false)
		if err := f.h.client.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the periodic job to delete the old run", func() bool { return !f.exists(t, f.old.id) })
		if !f.exists(t, f.young.id) {
			t.Error("young run deleted")
		}
	})
}

// TestRetentionOffKeepsEverything: without retention.runs nothing is
// scheduled and a pass deletes nothing.
func TestRetentionOffKeepsEverything(t *testing.T) {
	h := newHarness(t, testenv.DB{Path: t.TempDir() + "/autocapture.db"}, newLocalStore(t), false)
	h.addRun(t, "run-1", "succeeded", time.Now().Add(-365*24*time.Hour))
	if jobs := h.k.PeriodicJobs(); len(jobs) != 0 {
		t.Errorf("%d periodic jobs with retention off", len(jobs))
	}
	if n, err := h.k.RetentionOnce(context.Background()); n != 0 || err != nil {
		t.Errorf("retention off deleted %d, %v", n, err)
	}
}

// TestRetentionKnowsEveryRunTable: every table of ours keyed by a run
// (run_id) or a group's lead run (lead_run) is in what retention deletes, so
// a migration that adds one cannot leave its rows behind for ever (the
// uploads, groups and fleet tables were missed once).
func TestRetentionKnowsEveryRunTable(t *testing.T) {
	h := newHarness(t, testenv.DB{Path: t.TempDir() + "/autocapture.db"}, nil, false)
	ctx := context.Background()
	rows, err := h.db.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'autocapture_%'`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, name)
	}
	rows.Close()
	known := map[string]bool{}
	for _, tb := range database.RunTables {
		known[tb+".run_id"] = true
	}
	for _, tb := range database.LeadTables {
		known[tb+".lead_run"] = true
	}
	found := 0
	for _, tb := range tables {
		// autocapture_cooldowns is keyed by cooldown, its run_id the holder:
		// deleting it would end a long cooldown early (see database.RunTables).
		if tb == "autocapture_runs" || tb == "autocapture_migrations" || tb == "autocapture_cooldowns" {
			continue
		}
		cols, err := h.db.QueryContext(ctx, `SELECT name FROM pragma_table_info($1)`, tb)
		if err != nil {
			t.Fatal(err)
		}
		for cols.Next() {
			var col string
			if err := cols.Scan(&col); err != nil {
				t.Fatal(err)
			}
			if col == "run_id" || col == "lead_run" {
				found++
				if !known[tb+"."+col] {
					t.Errorf("%s.%s names a run, but retention does not delete from %s", tb, col, tb)
				}
			}
		}
		cols.Close()
	}
	if found < len(database.RunTables)+len(database.LeadTables)-1 {
		t.Fatalf("found %d run-keyed columns in %v: the schema query reads nothing", found, tables)
	}
}
