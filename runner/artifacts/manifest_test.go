package artifacts

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vocab"
)

// TestManifestTargetVersionOnlyFromVersionEndpoint: a JSON "version" from
// another endpoint (a model card) is not the target's version.
func TestManifestTargetVersionOnlyFromVersionEndpoint(t *testing.T) {
	rec := func(url string) executor.StepRecord {
		return executor.StepRecord{Kind: "http", Findings: map[string]any{"url": url, "json": map[string]any{"version": "9"}}}
	}
	if v := targetVersion([]executor.StepRecord{rec("http://h:8000/v1/models")}); v != "" {
		t.Errorf("version from /v1/models = %q, want none", v)
	}
	if v := targetVersion([]executor.StepRecord{rec("http://h:8000/v1/models"), rec("http://h:8000/version?x=1")}); v != "9" {
		t.Errorf("version from /version = %q, want 9", v)
	}
}

// TestManifestSurvivesACrashAfterTheFinish: the finish commits with the
// manifest's job; a process killed right after (no worker of its ran the
// job) still gets the manifest, from the next process on the database.
func TestManifestSurvivesACrashAfterTheFinish(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		st := newLocalStore(t)
		created := time.Now().Add(-time.Minute)
		a := newHarness(t, db, st, false) // never started: no worker runs anything
		a.finishedRun(t, "run-m2", created, "hello\n")
		a.stop() // kill -9 right after the commit
		ctx := context.Background()
		want := storage.ManifestKey(created, "VLLMSlowTTFT", "run-m2")
		if _, err := st.Stat(ctx, want); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("a manifest was written before any worker ran: %v", err)
		}
		b := newHarness(t, db, st, true)
		if key := b.waitManifest(t, "run-m2"); key != want {
			t.Fatalf("manifest key %q, want %q", key, want)
		}
		if m := manifestOf(t, st, want); m.Run.Status != "succeeded" || m.Run.ID != "run-m2" {
			t.Fatalf("manifest after the crash = %+v", m.Run)
		}
	})
}

// TestManifestRewrittenWhenALateUploadLands: EnqueueManifestTx after the run
// changed rewrites the manifest (the one overwrite), with the new state.
func TestManifestRewrittenWhenALateUploadLands(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		st := newLocalStore(t)
		created := time.Now().Add(-time.Minute)
		h := newHarness(t, db, st, true)
		rec := h.finishedRun(t, "run-m3", created, "first\n")
		key := h.waitManifest(t, "run-m3")
		if got := manifestOf(t, st, key).Playbooks[0].Steps[0].Summary; got != "stored" {
			t.Fatalf("first manifest summary %q", got)
		}
		late := h.lateUpload(t, rec, true)
		waitFor(t, "the manifest to show the late upload", func() bool {
			step := manifestOf(t, st, key).Playbooks[0].Steps[0]
			return step.Summary == "late upload landed" && len(step.Artifacts) == 2 && step.Artifacts[1].Key == late
		})
	})
}

// lateUpload stores one more artifact for rec's step of run-m3/run-m4 and
// records it; with job, with a manifest request in the same transaction, as
// the spool's upload does, else with only the manifest_seq bump of a
// request whose job is another replica's. It returns the new key.
func (h *harness) lateUpload(t *testing.T, rec executor.StepRecord, job bool) string {
	t.Helper()
	ctx := context.Background()
	key := strings.TrimSuffix(rec.Artifacts[0].Key, "out.txt") + "late.txt"
	obj, err := h.store.Put(ctx, key, strings.NewReader("late\n"), vocab.ObjectMeta{})
	if err != nil {
		t.Fatal(err)
	}
	runID := runIDOfKey(key)
	rec.Summary = "late upload landed"
	rec.Artifacts = append(rec.Artifacts, vocab.Artifact{Name: "late.txt", Key: key, Size: obj.Size, SHA256: obj.SHA256,
		ContentType: "text/plain"})
	tx, err := h.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	h.setStep(t, tx, runID, rec)
	if job {
		err = h.k.EnqueueManifestTx(ctx, tx, runID)
	} else {
		_, err = tx.ExecContext(ctx, `UPDATE autocapture_runs SET manifest_seq = manifest_seq + 1 WHERE id = $1`, runID)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return key
}

// racingStore runs land during the first manifest Put it sees, as another
// replica's request arriving mid-write would.
type racingStore struct {
	vocab.Store
	puts atomic.Int32
	land func()
}

func (r *racingStore) Put(ctx context.Context, key string, body io.Reader, meta vocab.ObjectMeta) (vocab.Object, error) {
	if meta.Replace && r.puts.Add(1) == 1 && r.land != nil {
		r.land()
	}
	return r.Store.Put(ctx, key, body, meta)
}

// TestManifestWriterCatchesUpWithAChangeMidWrite: a request that lands while
// a manifest is being written makes that writer write again, so the stored
// manifest is never older than the run's state (without the seq check, the
// first writer's stale bytes could be the last Put).
func TestManifestWriterCatchesUpWithAChangeMidWrite(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		local := newLocalStore(t)
		rs := &racingStore{Store: local}
		created := time.Now().Add(-time.Minute)
		h := newHarness(t, db, rs, false)
		rec := h.finishedRun(t, "run-m4", created, "first\n")
		rs.land = func() { h.lateUpload(t, rec, false) }
		if err := h.k.WriteManifest(context.Background(), "run-m4"); err != nil {
			t.Fatal(err)
		}
		if n := rs.puts.Load(); n != 2 {
			t.Errorf("the writer put %d times, want 2 (once stale, once current)", n)
		}
		if got := manifestOf(t, local, h.manifestKey(t, "run-m4")).Playbooks[0].Steps[0].Summary; got != "late upload landed" {
			t.Errorf("stored manifest says %q: the stale write won", got)
		}
	})
}

// TestManifestWrittenAfterItsWriterDied: a replica killed while it wrote a
// run's manifest leaves the job running in River's table, which River's
// rescuer would give back only after an hour. The manifest sweep asks for
// it again once the job has been running longer than a manifest takes, and
// the next process writes it.
func TestManifestWrittenAfterItsWriterDied(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		st := newLocalStore(t)
		created := time.Now().Add(-time.Minute)
		a := newHarness(t, db, st, false)
		a.finishedRun(t, "run-m-dead", created, "hello\n")
		ctx := context.Background()
		// a's worker fetched the manifest job a minute ago and died writing.
		fetched := `datetime('now', 'subsec', '-60 seconds')`
		if db.URL != "" {
			fetched = `statement_timestamp() - interval '60 seconds'`
		}
		res, err := a.db.ExecContext(ctx, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = `+fetched+`
			WHERE kind = $1`, ManifestKind)
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			t.Fatalf("%d manifest jobs, want 1", n)
		}
		a.stop()
		b := newHarness(t, db, st, true)
		if n, err := b.k.SweepManifests(ctx, testLease); err != nil || n != 1 {
			t.Fatalf("the sweep asked for %d manifests, %v; want 1", n, err)
		}
		key := b.waitManifest(t, "run-m-dead")
		if m := manifestOf(t, st, key); m.Run.Status != "succeeded" || m.Run.ID != "run-m-dead" {
			t.Fatalf("manifest after its writer died = %+v", m.Run)
		}
	})
}
