package lifecycle

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/artifacts"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vocab"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// fixedVersions replaces the build info for the test's duration.
func fixedVersions(t *testing.T) {
	old := artifacts.BuildVersions
	artifacts.BuildVersions = func() artifacts.ManifestVersions {
		return artifacts.ManifestVersions{Autocapture: "v1.2.3", AutocaptureRevision: "0123abcd", Go: "go1.99"}
	}
	t.Cleanup(func() { artifacts.BuildVersions = old })
}

// goldenRun is one run as stored: two tier-1 steps with artifacts (one
// compressed by the store, one the store no longer has), an http step that
// found vLLM's version, a triage verdict, and a tier-2 step that never ran.
func goldenRun(t *testing.T, st vocab.Store) (*runRow, []executor.StepRecord, onePlan) {
	t.Helper()
	ctx := context.Background()
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	created, started, finishedAt := at("2026-12-01T10:00:02Z"), at("2026-12-01T10:00:03Z"), at("2026-12-01T10:00:41Z")
	alert := template.Alert{Status: "firing", Fingerprint: "fp0123456789", StartsAt: at("2026-12-01T09:59:30Z"),
		GeneratorURL: "http://prometheus:9090/graph?g0.expr=x&g0.tab=1",
		Labels:       template.KV{"alertname": "VLLMSlowTTFT", "instance": "10.0.0.7:8000", "model_name": "llama"},
		Annotations:  template.KV{"summary": "p99 TTFT above 2s"}}
	steps := []playbooks.PlannedStep{
		{ID: "snapshot", Kind: "prometheus", Tier: vocab.TierMetrics, Config: map[string]any{"queries": []string{"vllm:num_requests_waiting"}}},
		{ID: "version", Kind: "http", Tier: vocab.TierMetrics, Config: map[string]any{"path": "/version"}},
		{ID: "triage", Kind: "triage", Tier: vocab.TierTriage},
		{ID: "traces", Kind: "traces", Tier: vocab.TierTraces, Config: map[string]any{"limit": 10}},
	}
	p := &playbooks.Plan{Playbook: "vllm-latency", File: "playbooks/vllm/latency.yaml", Digest: "sha256:abc", Source: []byte("name: vllm-latency"), Steps: steps}
	fp := onePlan{p}
	r := &runRow{Run: runs.Run{ID: "0193a1b2-0000-7000-8000-000000000001", Key: "fp0123456789/1795917570000",
		Fingerprint: alert.Fingerprint, Alertname: "VLLMSlowTTFT", Labels: alert.Labels, Annotations: alert.Annotations,
		StartsAt: alert.StartsAt, Status: vocab.StatusSucceeded, CreatedAt: created, StartedAt: &started, FinishedAt: &finishedAt,
		Attempts: 2, Resumed: 1, Verdict: &vocab.Verdict{ID: vocab.VerdictOverload, Evidence: []string{"queue 42 > 10"}}},
		alert: alert, received: alert, plans: storedPlans{p.Stored()},
		window: &vocab.Window{Start: at("2026-12-01T09:49:30Z"), End: at("2026-12-01T10:00:03Z")}}
	put := func(step, file, ctype string, body []byte) vocab.Artifact {
		key := storage.ArtifactKey(storage.ArtifactPath{Started: created, Alertname: r.Alertname, RunID: r.ID,
			Plan: p.Playbook, Step: step, File: file, Attempt: 2})
		obj, err := st.Put(ctx, key, bytes.NewReader(body), vocab.ObjectMeta{ContentType: ctype})
		if err != nil {
			t.Fatal(err)
		}
		return vocab.Artifact{Name: file, Key: obj.Key, ContentType: ctype, Size: obj.Size, SHA256: obj.SHA256}
	}
	snap := put("snapshot", "snapshot.json", "application/json", bytes.Repeat([]byte(`{"metric":"vllm:num_requests_waiting","value":42}`+"\n"), 50))
	ver := put("version", "response.json", "application/json", []byte(`{"version":"0.11.0"}`))
	gone := vocab.Artifact{Name: "chart.png", Key: strings.TrimSuffix(snap.Key, "snapshot.json") + "chart.png",
		ContentType: "image/png", Size: 1234, SHA256: strings.Repeat("ab", 32)}
	t0 := started.Add(time.Second)
	recs := []executor.StepRecord{ // in finish order, as loadSteps gives them
		{Plan: p.Playbook, ID: "version", Kind: "http", Tier: vocab.TierMetrics, Status: vocab.StatusSucceeded,
			Summary: "GET /version: 200, 20 bytes of application/json", Artifacts: []vocab.Artifact{ver},
			Findings:  map[string]any{"url": "http://10.0.0.7:8000/version", "status": 200.0, "json": map[string]any{"version": "0.11.0"}},
			StartedAt: t0, FinishedAt: t0.Add(40 * time.Millisecond), DurationMS: 40},
		{Plan: p.Playbook, ID: "snapshot", Kind: "prometheus", Tier: vocab.TierMetrics, Status: vocab.StatusSucceeded,
			Summary: "3 queries", Artifacts: []vocab.Artifact{snap, gone}, Signals: vocab.Signals{"queue_waiting": 42},
			Findings: map[string]any{"queries": 3.0, "b": "<b>&</b>"}, StartedAt: t0, FinishedAt: t0.Add(900 * time.Millisecond), DurationMS: 900},
		{Plan: p.Playbook, ID: "triage", Kind: "triage", Tier: vocab.TierTriage, Status: vocab.StatusSucceeded,
			Summary: "overload", Verdict: r.Verdict, StartedAt: t0.Add(time.Second), FinishedAt: t0.Add(time.Second), DurationMS: 0},
	}
	return r, recs, fp
}

// TestManifestGolden: the manifest's bytes for a fixed run (rerun with -update
// to rewrite runner/lifecycle/testdata/manifest.golden.json after an intended change).
func TestManifestGolden(t *testing.T) {
	fixedVersions(t)
	st, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r, recs, fp := goldenRun(t, st)
	s := &Runs{planner: fp, log: zap.NewNop()}
	m, err := artifacts.BuildManifest(context.Background(), s.manifestInput(r, recs), st)
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	// The same run in another record order gives the same bytes.
	recs[0], recs[2] = recs[2], recs[0]
	again, _ := artifacts.BuildManifest(context.Background(), s.manifestInput(r, recs), st)
	if b, _ := again.Encode(); !bytes.Equal(b, got) {
		t.Errorf("the manifest depends on the order records finished in")
	}
	golden := filepath.Join("testdata", "manifest.golden.json")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs (rerun with -update if intended):\n%s", golden, got)
	}
	// What the golden file must keep saying, whatever else changes.
	var back map[string]any
	if err := json.Unmarshal(got, &back); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"target": "0.11.0"`, `"content_encoding": "gzip"`, `"missing": true`,
		`"status": "not_run"`, `"digest": "sha256:abc"`, `"fingerprint": "fp0123456789"`, `"<b>&</b>"`} {
		if !strings.Contains(string(got), want) {
			t.Errorf("manifest lacks %s", want)
		}
	}
}

// onePlan is a Planner of one plan: Rebuild returns it for a stored plan of
// its playbook and digest.
type onePlan struct{ p *playbooks.Plan }

func (o onePlan) Plan(template.Alert, vocab.Window) ([]*playbooks.Plan, error) {
	return []*playbooks.Plan{o.p}, nil
}

func (o onePlan) Rebuild(sp playbooks.StoredPlan, _ template.Alert, _ vocab.Window) (*playbooks.Plan, error) {
	if o.p.Playbook == sp.Playbook && o.p.Digest == sp.Digest {
		return o.p, nil
	}
	return nil, fmt.Errorf("no playbook %s with digest %s", sp.Playbook, sp.Digest)
}
