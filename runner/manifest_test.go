package runner

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/artifacts"
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
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
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
