package runner

import (
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/artifacts"
	"github.com/autocapture/autocapture/runner/lifecycle"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vocab"
)

// manifestOf reads the run's manifest from st.
func manifestOf(t *testing.T, st vocab.Store, key string) artifacts.Manifest {
	t.Helper()
	rc, err := st.Open(context.Background(), key)
	if err != nil {
		t.Fatalf("open manifest %s: %v", key, err)
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	var m artifacts.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("manifest %s: %v\n%s", key, err, b)
	}
	return m
}

func withStore(st vocab.Store) svcOpt {
	return func(o *Options) { o.Env = &vocab.Env{Store: st} }
}

// waitManifest waits (a hang guard, not a timing assertion) until the run
// API shows the manifest key.
func waitManifest(t *testing.T, s *Service, id string) *runs.Run {
	return waitRun(t, s, id, "with a manifest", func(r *runs.Run) bool { return r.Manifest != "" })
}

// artifactStep puts one artifact, as a capture step does.
func artifactStep(body string) vocab.Step {
	return fakestep.Func(func(ctx context.Context, in *vocab.Input) (*vocab.Result, error) {
		key := storage.ArtifactKey(storage.ArtifactPath{Started: in.RunCreated, Alertname: in.Alert.Labels["alertname"],
			RunID: in.RunID, Plan: in.Plan, Step: in.StepID, File: "out.txt", Attempt: in.Attempt})
		obj, err := in.Env.Store.Put(ctx, key, strings.NewReader(body), vocab.ObjectMeta{ContentType: "text/plain"})
		if err != nil {
			return nil, err
		}
		return &vocab.Result{Summary: "stored", Artifacts: []vocab.Artifact{{Name: "out.txt", Key: obj.Key,
			ContentType: "text/plain", Size: obj.Size, SHA256: obj.SHA256}}}, nil
	})
}

// TestManifestWrittenAfterFinish: a finished run gets its manifest under
// ManifestKey, the run API shows the key, and what it lists is the run.
func TestManifestWrittenAfterFinish(t *testing.T) {
	forEachStore(t, func(t *testing.T, db dbRef) {
		st, _ := storage.NewLocal(t.TempDir())
		p := planner(func() playbooks.PlannedStep {
			return fakestep.Step("grab", vocab.TierMetrics, artifactStep("hello\n"))
		})
		s := newService(t, db, p, true, withStore(st))
		acc := acceptOne(t, s, firing("fp-m1", time.Now().Add(-time.Minute)))
		r := waitManifest(t, s, acc.RunID)
		if want := storage.ManifestKey(r.CreatedAt, r.Alertname, r.ID); r.Manifest != want {
			t.Fatalf("manifest key %q, want %q", r.Manifest, want)
		}
		m := manifestOf(t, st, r.Manifest)
		if m.Run.ID != r.ID || m.Run.Status != vocab.StatusSucceeded || len(m.Playbooks) != 1 || len(m.Playbooks[0].Steps) != 1 {
			t.Fatalf("manifest = %+v", m)
		}
		step := m.Playbooks[0].Steps[0]
		if step.Status != vocab.StatusSucceeded || len(step.Artifacts) != 1 || step.Artifacts[0].Key != r.Steps[0].Artifacts[0].Key ||
			step.Artifacts[0].SHA256 != r.Steps[0].Artifacts[0].SHA256 || step.Artifacts[0].Missing {
			t.Fatalf("manifest step = %+v, run's record %+v", step, r.Steps[0])
		}
		if m.Alert.Fingerprint != "fp-m1" || m.Alert.Labels["alertname"] != "VLLMSlowTTFT" {
			t.Errorf("manifest alert = %+v", m.Alert)
		}
	})
}

// finishedUnwritten accepts an alert on a Service that is never started (no
// worker of River's runs anything) and works its job by hand, as a worker
// would have: the finish commits the manifest's job, which nothing has run
// yet. It returns the planner for the next Service.
func finishedUnwritten(t *testing.T, db dbRef, st vocab.Store, fp string) (lifecycle.Planner, *Service, runs.Accepted, *runs.Run) {
	t.Helper()
	p := planner(func() playbooks.PlannedStep {
		return fakestep.Step("grab", vocab.TierMetrics, fakestep.OK(fakestep.NewCounter(), nil))
	})
	a := newService(t, db, p, false, withStore(st))
	acc := acceptOne(t, a, firing(fp, time.Now().Add(-time.Minute)))
	ctx := context.Background()
	if err := a.life.Work(ctx, lifecycle.RunJob{RunID: acc.RunID}); err != nil {
		t.Fatal(err)
	}
	row, err := a.Get(ctx, acc.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if row.Status != vocab.StatusSucceeded {
		t.Fatalf("run %s (%s), want succeeded", row.Status, row.Reason)
	}
	return p, a, acc, row
}

// TestManifestSurvivesACrashAfterTheFinish: the finish commits with the
// manifest's job; a process killed right after (no worker of its ran the
// job) still gets the manifest, from the next Service on the database.
func TestManifestSurvivesACrashAfterTheFinish(t *testing.T) {
	forEachStore(t, func(t *testing.T, db dbRef) {
		st, _ := storage.NewLocal(t.TempDir())
		p, a, acc, row := finishedUnwritten(t, db, st, "fp-m2")
		ctx := context.Background()
		a.abandon() // kill -9 right after the commit
		if r, _ := st.Stat(ctx, storage.ManifestKey(row.CreatedAt, row.Alertname, row.ID)); r.Key != "" {
			t.Fatal("a manifest was written before any worker ran")
		}
		b := newService(t, db, p, true, withStore(st))
		r := waitManifest(t, b, acc.RunID)
		if m := manifestOf(t, st, r.Manifest); m.Run.Status != vocab.StatusSucceeded || m.Run.ID != acc.RunID {
			t.Fatalf("manifest after the crash = %+v", m.Run)
		}
	})
}

// TestManifestRewrittenWhenALateUploadLands: EnqueueManifestTx after the run
// changed rewrites the manifest (the one overwrite), with the new state.
func TestManifestRewrittenWhenALateUploadLands(t *testing.T) {
	forEachStore(t, func(t *testing.T, db dbRef) {
		st, _ := storage.NewLocal(t.TempDir())
		p := planner(func() playbooks.PlannedStep {
			return fakestep.Step("grab", vocab.TierMetrics, artifactStep("first\n"))
		})
		s := newService(t, db, p, true, withStore(st))
		acc := acceptOne(t, s, firing("fp-m3", time.Now().Add(-time.Minute)))
		r := waitManifest(t, s, acc.RunID)
		if got := manifestOf(t, st, r.Manifest).Playbooks[0].Steps[0].Summary; got != "stored" {
			t.Fatalf("first manifest summary %q", got)
		}
		late := lateUpload(t, s, st, r)
		deadline := time.Now().Add(30 * time.Second)
		for {
			step := manifestOf(t, st, r.Manifest).Playbooks[0].Steps[0]
			if step.Summary == "late upload landed" && len(step.Artifacts) == 2 && step.Artifacts[1].Key == late {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("manifest never showed the late upload: %+v", step)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// lateUpload stores one more artifact for the run's step and records it with
// a manifest request in one transaction, as the spool does; its key.
func lateUpload(t *testing.T, s *Service, st vocab.Store, r *runs.Run) string {
	t.Helper()
	ctx := context.Background()
	rec := r.Steps[0]
	key := strings.TrimSuffix(rec.Artifacts[0].Key, "out.txt") + "late.txt"
	obj, err := st.Put(ctx, key, strings.NewReader("late\n"), vocab.ObjectMeta{})
	if err != nil {
		t.Fatal(err)
	}
	rec.Summary = "late upload landed"
	rec.Artifacts = append(rec.Artifacts, vocab.Artifact{Name: "late.txt", Key: key, Size: obj.Size, SHA256: obj.SHA256, ContentType: "text/plain"})
	b, _ := json.Marshal(rec)
	tx, err := rawDB(s).BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE autocapture_steps SET record = $1 WHERE run_id = $2 AND step_id = $3`, string(b), r.ID, rec.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.art.EnqueueManifestTx(ctx, tx, r.ID); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return key
}

// racingStore lands a late upload (through land) during the first manifest
// Put it sees, as another replica's request arriving mid-write would.
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
	db := dbRef{Path: filepath.Join(t.TempDir(), "autocapture.db")}
	local, _ := storage.NewLocal(t.TempDir())
	rs := &racingStore{Store: local}
	p := planner(func() playbooks.PlannedStep {
		return fakestep.Step("grab", vocab.TierMetrics, artifactStep("first\n"))
	})
	s := newService(t, db, p, false, withStore(rs))
	acc := acceptOne(t, s, firing("fp-m4", time.Now().Add(-time.Minute)))
	ctx := context.Background()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	r := waitManifest(t, s, acc.RunID)
	rs.puts.Store(0) // the finish's job has put once and will not again (its seq was current)
	rs.land = func() { lateUploadNoJob(t, s, local, r) }
	if err := s.art.WriteManifest(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	if n := rs.puts.Load(); n != 2 {
		t.Errorf("the writer put %d times, want 2 (once stale, once current)", n)
	}
	if got := manifestOf(t, local, r.Manifest).Playbooks[0].Steps[0].Summary; got != "late upload landed" {
		t.Errorf("stored manifest says %q: the stale write won", got)
	}
}

// lateUploadNoJob is lateUpload with only the seq bump of a request (its
// job is another replica's).
func lateUploadNoJob(t *testing.T, s *Service, st vocab.Store, r *runs.Run) {
	ctx := context.Background()
	rec := r.Steps[0]
	rec.Summary = "late upload landed"
	b, _ := json.Marshal(rec)
	if _, err := rawDB(s).ExecContext(ctx, `UPDATE autocapture_steps SET record = $1 WHERE run_id = $2 AND step_id = $3`, string(b), r.ID, rec.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := rawDB(s).ExecContext(ctx, `UPDATE autocapture_runs SET manifest_seq = manifest_seq + 1 WHERE id = $1`, r.ID); err != nil {
		t.Fatal(err)
	}
}
