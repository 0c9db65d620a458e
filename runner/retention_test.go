package runner

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/artifacts"
	"github.com/autocapture/autocapture/runner/lifecycle"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vocab"
)

// forEachArtifactStore runs f on a Local folder and on a real S3 server
// (versitygw, started by internal/testkit/testenv).
func forEachArtifactStore(t *testing.T, f func(t *testing.T, st vocab.Store)) {
	t.Run("local", func(t *testing.T) {
		st, err := storage.NewLocal(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		f(t, st)
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

func withRetention(r config.Retention) svcOpt { return func(o *Options) { o.Retention = r } }

const month = 30 * 24 * time.Hour

// retentionFixture is three runs on one Service: old (finished, backdated
// past the cutoff), young (finished now) and unfinished (old, but still
// running), each with objects under its folder.
type retentionFixture struct {
	s                      *Service
	planner                lifecycle.Planner // the Service's
	st                     vocab.Store
	old, young, unfinished *runs.Run
}

func newRetentionFixture(t *testing.T, db dbRef, st vocab.Store, artifacts string) *retentionFixture {
	t.Helper()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	started := make(chan string, 1)
	p := fakePlanner{Plans: func(a template.Alert) []*playbooks.Plan {
		step := fakestep.Step("grab", vocab.TierMetrics, artifactStep("evidence\n"))
		if strings.HasPrefix(a.Fingerprint, "fp-unfinished") {
			step = fakestep.Step("grab", vocab.TierMetrics, fakestep.Block(fakestep.NewCounter(), started, release))
		}
		return []*playbooks.Plan{plan("pb", step)}
	}}
	passes := completedPasses(t, db) // fixtures may share a database: count this service's pass only
	s := newService(t, db, p, true, withStore(st),
		withRetention(config.Retention{Runs: config.Age(month), Artifacts: artifacts, Interval: time.Hour}))
	f := &retentionFixture{s: s, planner: p, st: st}
	at := time.Now().Add(-time.Minute)
	// Fingerprints of this test only: fixtures may share a database.
	oldID := acceptOne(t, s, firing("fp-old "+t.Name(), at)).RunID
	youngID := acceptOne(t, s, firing("fp-young "+t.Name(), at)).RunID
	unfinishedID := acceptOne(t, s, firing("fp-unfinished "+t.Name(), at)).RunID
	f.old, f.young = waitManifest(t, s, oldID), waitManifest(t, s, youngID)
	fakestep.WaitFor(t, started, "the unfinished run's step")
	f.unfinished = waitRun(t, s, unfinishedID, "running", func(r *runs.Run) bool { return r.Status == vocab.StatusRunning })
	// An object of the unfinished run, as its first steps would have stored.
	key := storage.ArtifactKey(storage.ArtifactPath{Started: f.unfinished.CreatedAt, Alertname: f.unfinished.Alertname,
		RunID: f.unfinished.ID, Plan: "pb", Step: "early", File: "early.txt"})
	if _, err := st.Put(context.Background(), key, strings.NewReader("early\n"), vocab.ObjectMeta{}); err != nil {
		t.Fatal(err)
	}
	// River's periodic pass at start (RunOnStart) has run before anything
	// is aged: waited for, not assumed. Under load it came after the aging,
	// took the old run itself, and the tests' own passes found nothing.
	ctx := context.Background()
	waitStartPass(t, s, passes)
	// The old and the unfinished run are 40 days old on the database's clock.
	back := (40 * 24 * time.Hour).Milliseconds()
	if _, err := rawDB(s).ExecContext(ctx, `UPDATE autocapture_runs SET finished_at = finished_at - $1 WHERE id = $2`, back, oldID); err != nil {
		t.Fatal(err)
	}
	if _, err := rawDB(s).ExecContext(ctx, `UPDATE autocapture_runs SET created_at = created_at - $1, queued_at = queued_at - $1,
		started_at = started_at - $1 WHERE id = $2`, back, unfinishedID); err != nil {
		t.Fatal(err)
	}
	return f
}

// objects lists the keys under the run's folder.
func (f *retentionFixture) objects(t *testing.T, r *runs.Run) []string {
	t.Helper()
	var keys []string
	if err := f.st.List(context.Background(), storage.RunPrefix(r.CreatedAt, r.Alertname, r.ID), func(e vocab.ListEntry) error {
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
		if err := rawDB(f.s).QueryRowContext(context.Background(), `SELECT COUNT(*) FROM `+table+` WHERE `+col+` = $1`, id).Scan(&c); err != nil {
			t.Fatal(err)
		}
		n += c
	}
	return n
}

// TestRetentionDeletesOnlyOldFinishedRuns: the old run's rows and objects
// (its artifact and its manifest) go; the young run and the old unfinished
// one keep theirs.
func TestRetentionDeletesOnlyOldFinishedRuns(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, db dbRef) {
		forEachArtifactStore(t, func(t *testing.T, st vocab.Store) {
			f := newRetentionFixture(t, db, st, config.RetainArtifactsDelete)
			oldObjects, youngObjects := f.objects(t, f.old), f.objects(t, f.young)
			if len(oldObjects) != 2 || len(youngObjects) != 2 || f.rowsOf(t, f.old.ID) < 3 {
				t.Fatalf("fixture: old %v, young %v, old rows %d; want an artifact and a manifest each",
					oldObjects, youngObjects, f.rowsOf(t, f.old.ID))
			}
			// River's periodic pass (RunOnStart) may have taken the old run
			// first; passes take turns, so after this one it is gone either way.
			n, err := f.s.art.RetentionOnce(context.Background())
			if total := testutil.ToFloat64(f.s.art.Metrics().RetentionDeleted.WithLabelValues("runs")); err != nil || n > 1 || total != 1 {
				t.Fatalf("retention deleted %d runs (%v in all), %v; want 1 in all", n, total, err)
			}
			if _, err := f.s.Get(context.Background(), f.old.ID); !errors.Is(err, runs.ErrNotFound) {
				t.Errorf("old run still served: %v", err)
			}
			if rows := f.rowsOf(t, f.old.ID); rows != 0 {
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
			for _, r := range []*runs.Run{f.young, f.unfinished} {
				if _, err := f.s.Get(context.Background(), r.ID); err != nil {
					t.Errorf("run %s deleted: %v", r.ID, err)
				}
			}
			if got := testutil.ToFloat64(f.s.art.Metrics().RetentionDeleted.WithLabelValues("runs")); got != 1 {
				t.Errorf("deleted_total{kind=runs} = %v, want 1", got)
			}
			if got := testutil.ToFloat64(f.s.art.Metrics().RetentionDeleted.WithLabelValues("objects")); got != 2 {
				t.Errorf("deleted_total{kind=objects} = %v, want 2", got)
			}
			if n, err := f.s.art.RetentionOnce(context.Background()); n != 0 || err != nil {
				t.Errorf("a second tick deleted %d, %v; want nothing", n, err)
			}
		})
	})
}

// TestRetentionWithBucketLifecycleKeepsObjects: artifacts: bucket deletes
// rows only; the objects are the lifecycle rule's.
func TestRetentionWithBucketLifecycleKeepsObjects(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, db dbRef) {
		forEachArtifactStore(t, func(t *testing.T, st vocab.Store) {
			f := newRetentionFixture(t, db, st, config.RetainArtifactsBucket)
			if n, err := f.s.art.RetentionOnce(context.Background()); err != nil || n != 1 {
				t.Fatalf("retention deleted %d runs, %v; want 1", n, err)
			}
			if rows := f.rowsOf(t, f.old.ID); rows != 0 {
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
	forEachStore(t, func(t *testing.T, db dbRef) {
		forEachArtifactStore(t, func(t *testing.T, st vocab.Store) {
			f := newRetentionFixture(t, db, st, config.RetainArtifactsDelete)
			ctx := context.Background()
			batch, err := f.s.art.OldRuns(ctx, month.Milliseconds(), nil)
			if err != nil || len(batch) != 1 || batch[0].ID != f.old.ID {
				t.Fatalf("old runs = %+v, %v; want the old run only", batch, err)
			}
			if err := f.s.art.DeleteRunObjects(ctx, batch[0]); err != nil { // then the process dies
				t.Fatal(err)
			}
			if keys := f.objects(t, f.old); len(keys) != 0 || f.rowsOf(t, f.old.ID) == 0 {
				t.Fatalf("after the objects: %v left, %d rows", keys, f.rowsOf(t, f.old.ID))
			}
			if n, err := f.s.art.RetentionOnce(ctx); err != nil || n != 1 {
				t.Fatalf("the next tick deleted %d runs, %v; want 1 without error", n, err)
			}
			if rows := f.rowsOf(t, f.old.ID); rows != 0 {
				t.Errorf("old run left %d rows", rows)
			}
			if got := testutil.ToFloat64(f.s.art.Metrics().RetentionErrors); got != 0 {
				t.Errorf("errors_total = %v, want 0 (a missing key is not an error)", got)
			}
		})
	})
}

// TestRetentionRunsOnTheLeader: with retention on, River's leader inserts
// the periodic job at start and it deletes an old run without a direct call.
func TestRetentionRunsOnTheLeader(t *testing.T) {
	t.Parallel()
	db := dbRef{Path: t.TempDir() + "/autocapture.db"}
	st, _ := storage.NewLocal(t.TempDir())
	f := newRetentionFixture(t, db, st, config.RetainArtifactsDelete)
	f.s.Close() // the fixture's Service has ticked already, before anything was old
	s := newService(t, db, f.planner, true, withStore(st),
		withRetention(config.Retention{Runs: config.Age(month), Artifacts: config.RetainArtifactsDelete, Interval: time.Hour}))
	deadline := time.Now().Add(60 * time.Second) // a hang guard, not a timing assertion
	for {
		_, err := s.Get(context.Background(), f.old.ID)
		if errors.Is(err, runs.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the periodic job never deleted the old run: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := s.Get(context.Background(), f.young.ID); err != nil {
		t.Errorf("young run deleted: %v", err)
	}
}

// TestRetentionKnowsEveryRunTable: every table of ours keyed by a run
// (run_id) or a group's lead run (lead_run) is in what retention deletes, so
// a migration that adds one cannot leave its rows behind for ever (the
// uploads, groups and fleet tables were missed once).
func TestRetentionKnowsEveryRunTable(t *testing.T) {
	s := newService(t, dbRef{Path: filepath.Join(t.TempDir(), "autocapture.db")}, planner(), false)
	ctx := context.Background()
	rows, err := s.db.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'autocapture_%'`)
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
		cols, err := s.db.QueryContext(ctx, `SELECT name FROM pragma_table_info($1)`, tb)
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

// waitStartPass waits for the retention job River's leader runs at start to
// complete: more completed passes than before the service started.
func waitStartPass(t *testing.T, s *Service, before int) {
	t.Helper()
	waitFor(t, "River's retention pass at start", func() bool {
		n, err := countPasses(rawDB(s))
		return err == nil && n > before
	})
}

// completedPasses counts the retention jobs completed in db so far (0 for
// a database not migrated yet).
func completedPasses(t *testing.T, db dbRef) int {
	t.Helper()
	conn, _, _, err := database.Open(db.URL, db.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	n, err := countPasses(conn)
	if err != nil {
		return 0 // no river_job table yet
	}
	return n
}

func countPasses(db *sql.DB) (int, error) {
	var n int
	err := db.QueryRowContext(context.Background(),
		`SELECT COUNT(*) FROM river_job WHERE kind = $1 AND state = 'completed'`, artifacts.RetentionKind).Scan(&n)
	return n, err
}
