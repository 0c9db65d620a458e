package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/autocapture/autocapture/capture/profile"
	"github.com/autocapture/autocapture/internal/testkit/manifestcheck"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/torchtrace"
	"github.com/autocapture/autocapture/vllmsim"
	"github.com/autocapture/autocapture/vocab"
)

// baselineAlert is the test's own alert for the healthy capture kept as the
// model's baseline (no shipped rule fires on a healthy server).
const baselineAlert = "E2EProfileBaseline"

// baselinePlaybook frames the healthy sim once with baseline: true, reading
// its profiler folder directly (the daemon and the sim share a disk here).
func baselinePlaybook(dir string) string {
	return fmt.Sprintf(`playbooks:
  - name: e2e-profile-baseline
    description: a healthy capture kept as the model's baseline
    match:
      - alertname="%s"
    timeout: 5m
    steps:
      - id: profile
        tier: 3
        timeout: 3m
        profile:
          duration: 5s
          stop_timeout: 1m
          baseline: true
          collect: {dir: %q}
`, baselineAlert, dir)
}

// TestProfileUnexplainedEndToEnd is tier 3's proof with the shipped rules and
// playbooks: the unexplained sim's GEMM regression fires a paging alert in a
// real Prometheus, a real Alertmanager delivers it, the shipped playbook's
// triage finds no visible cause, and the shipped vllm-profile step frames the
// sim, collects its traces through a real `autocapture agent` on the sim's
// host:9101, stores them in a real S3 (MinIO) and reads them: top family
// GEMM, compared with a healthy capture of the same model kept before as the
// baseline (the test's own playbook, fired by a webhook the test posts, since
// no shipped rule fires on a healthy server). The stored traces are downloaded
// and parsed again here; the sims' profilers saw one start and one stop each,
// no protocol violation; no lease is left held.
func TestProfileUnexplainedEndToEnd(t *testing.T) {
	t.Parallel()
	bucket := testenv.StartMinIO(t)
	ps := startProfileStack(t, profileStackOptions{
		Scenarios: []string{vllmsim.ScenarioHealthy, vllmsim.ScenarioUnexplained}, Shipped: true, S3: bucket,
		Playbooks: func(d map[string]string) map[string]string {
			return map[string]string{"e2e-profile-baseline.yaml": baselinePlaybook(d[vllmsim.ScenarioHealthy])}
		},
	})
	healthy, sick := ps.Sims[vllmsim.ScenarioHealthy], ps.Sims[vllmsim.ScenarioUnexplained]

	// The baseline first: the shipped rules need their (shortened) window
	// before the unexplained alert fires, a healthy capture takes seconds.
	al := firingAlert(baselineAlert, healthy.Addr, "e2ebaseline00001")
	al.Labels["model_name"] = profileModel
	base := ps.waitRun(t, acceptedRun(t, postWebhook(t, ps.API, al)[0]), 2*time.Minute)
	bst := stepByKind(base, "profile")
	if bst == nil || bst.Status != vocab.StatusSucceeded || bst.Findings["top_family"] == nil || bst.Findings["compared_with"] != nil {
		t.Fatalf("baseline capture: want a succeeded profile with a top family and nothing to compare with: %s\n%v", describe(base), stepFindings(bst))
	}
	t.Logf("baseline (healthy) %s: %s", base.ID, bst.Summary)

	profRun, prof := waitProfiled(t, ps.stack, sick, 5*time.Minute)
	if !prof.StartedAt.After(*base.FinishedAt) {
		t.Errorf("the unexplained capture started %s, before the baseline run finished %s", prof.StartedAt, base.FinishedAt)
	}
	if profRun.Labels["severity"] != "page" || profRun.Verdict == nil || profRun.Verdict.ID != vllmsim.ScenarioUnexplained {
		t.Errorf("profiled run: want a paging alert with verdict unexplained: %s", describe(profRun))
	}
	if prof.Findings["armed"] != true || prof.Findings["top_family"] != string(torchtrace.FamilyGEMM) {
		t.Errorf("profile findings: want armed, top family gemm: %v", stepFindings(prof))
	}
	cw, _ := prof.Findings["compared_with"].(map[string]any)
	if cw["run_id"] != base.ID || cw["baseline"] != true {
		t.Errorf("profile compared_with %v, want the kept baseline of run %s", prof.Findings["compared_with"], base.ID)
	}
	t.Logf("unexplained %s (%s): %s", profRun.ID, profRun.Alertname, prof.Summary)
	// The capture's cost to live traffic, in the run's JSON: measured from
	// the sim's /metrics around the frame and the stop, whose flush blocks
	// the engine.
	cost, _ := prof.Findings["cost"].(map[string]any)
	if cost == nil || cost["before"] == nil || cost["stop"] == nil || !strings.Contains(prof.Summary, "cost: ") {
		t.Errorf("profile cost %v, summary %q: want it measured and said", prof.Findings["cost"], prof.Summary)
	} else {
		t.Logf("unexplained capture's cost: %v (stall %v s)", cost["summary"], cost["stall_s"])
	}

	ctx := context.Background()
	read := func(key string) []byte {
		t.Helper()
		obj, err := bucket.Client().GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket.Bucket), Key: aws.String(s3Prefix + "/" + key)})
		if err != nil {
			t.Fatalf("s3 %s: %v", key, err)
		}
		defer obj.Body.Close()
		b, err := io.ReadAll(obj.Body)
		if err != nil {
			t.Fatalf("s3 %s: %v", key, err)
		}
		return manifestcheck.Decode(t, b, aws.ToString(obj.ContentEncoding))
	}
	rep := checkStoredProfile(t, prof, read, ps.Dirs[vllmsim.ScenarioUnexplained])
	checkRegressionDelta(t, rep, bst, base.ID)
	// The truth: the GEMM share of the kernels the sim wrote (its own
	// bookkeeping, not read back from the files), in Kineto's current layout
	// (the base floored to a 3-month boundary, weeks before the events).
	truth := sick.profilerStatus(t).LastCapture
	if got := rep.Analysis.Families[torchtrace.FamilyGEMM]; truth.GPUus <= 0 || math.Abs(got-truth.GEMMShare()) > 1e-6 ||
		math.Abs(rep.Analysis.KernelUS-truth.GPUus) > 1e-3*float64(truth.Kernels) {
		t.Errorf("the step read GEMM %.6f of %.0f µs; the sim wrote GEMM %.6f of %.0f µs (%d kernels)",
			got, rep.Analysis.KernelUS, truth.GEMMShare(), truth.GPUus, truth.Kernels)
	}
	if f := rep.Analysis.Frame; f.Source != torchtrace.FrameSpan || f.Clipped || rep.Analysis.Attribution.Uncredited != 0 {
		t.Errorf("the step's frame %+v and attribution %+v: want the profiler's span, unclipped, every kernel credited", f, rep.Analysis.Attribution)
	}
	checkBucket(t, ps.stack, bucket, ps.runs(t))

	// The servers' side: one start, one stop each, no violation, nothing
	// recording or being written; the fleet holds no lease.
	for _, sm := range []*sim{healthy, sick} {
		st := sm.profilerStatus(t)
		for kind, n := range st.Violations {
			if n != 0 {
				t.Errorf("%s: /admin/profiler: %d %s violations", sm.Scenario, n, kind)
			}
		}
		if st.State != "idle" || st.Starts != 1 || st.Stops != 1 || st.PendingWrites != 0 {
			t.Errorf("%s: /admin/profiler: state %s, starts %d, stops %d, pending writes %d; want idle, 1, 1, 0",
				sm.Scenario, st.State, st.Starts, st.Stops, st.PendingWrites)
		}
	}
	var fleet runs.ProfilingStatus
	ps.getJSON(t, "/api/v1/profiling", &fleet)
	if len(fleet.Leases) != 0 || fleet.Budget.Active != 0 || fleet.Paused {
		t.Errorf("GET /api/v1/profiling: %d leases held, %d active, paused %v; want none", len(fleet.Leases), fleet.Budget.Active, fleet.Paused)
	}

	since, until := findingsTime(t, prof, "since"), findingsTime(t, prof, "until")
	stop := time.Duration(prof.Findings["stop_seconds"].(float64) * float64(time.Second))
	t.Logf("tier 3 took %s of the run's %s: frame %s, stop_profile %s, stop answered → step recorded %s (collect, analysis, upload, report)",
		prof.FinishedAt.Sub(prof.StartedAt).Round(time.Millisecond), runTook(profRun), until.Sub(since).Round(time.Millisecond),
		stop.Round(time.Millisecond), prof.FinishedAt.Sub(until.Add(stop)).Round(time.Millisecond))
}

// TestProfileUnarmedIsOneFinding: the same paging unexplained alert, the
// shipped playbook, the agent in place, but vLLM started without a profiler
// (start_profile answers 404): the profile step fails once with the finding
// "not armed" and how to arm it, the run keeps its tier-1/2 evidence
// (partial, not failed), and no lease is left.
func TestProfileUnarmedIsOneFinding(t *testing.T) {
	t.Parallel()
	ps := startProfileStack(t, profileStackOptions{Scenarios: []string{vllmsim.ScenarioUnexplained}, Shipped: true, Unarmed: true})
	sm := ps.Sims[vllmsim.ScenarioUnexplained]
	r, st := waitProfileRan(t, ps.stack, sm, 5*time.Minute)
	if st.Status != vocab.StatusFailed || st.Reason != string(vocab.ReasonUpstream4xx) || st.Findings["armed"] != false ||
		!strings.Contains(fmt.Sprint(st.Findings["how_to_arm"]), "--profiler-config") {
		t.Errorf("unarmed: want the profile step failed upstream-4xx with armed false and how to arm: %s\n%v", describe(r), st.Findings)
	}
	if r.Status != "partial" || r.Verdict == nil || r.Verdict.ID != vllmsim.ScenarioUnexplained {
		t.Errorf("unarmed: want the run partial with its verdict kept: %s", describe(r))
	}
	if prof := sm.profilerStatus(t); prof.Armed || prof.Starts != 0 {
		t.Errorf("unarmed sim /admin/profiler: armed %v, starts %d, state %s", prof.Armed, prof.Starts, prof.State)
	}
	var fleet runs.ProfilingStatus
	ps.getJSON(t, "/api/v1/profiling", &fleet)
	if len(fleet.Leases) != 0 || fleet.Budget.Active != 0 {
		var trail any
		ps.getJSON(t, "/api/v1/runs/"+r.ID+"/profile", &trail)
		t.Errorf("GET /api/v1/profiling after an unarmed capture: %d leases held, %d active, want none "+
			"(a lease left recording is swept: stop_profile → 404 → stop_failed, held until an operator clears it, "+
			"counting against max_concurrent): %+v\nthe run's profile trail: %v", len(fleet.Leases), fleet.Budget.Active, fleet.Leases, trail)
	}
	t.Logf("unarmed: run %s %s; profile %s %s: %s", r.ID, r.Status, st.Status, st.Reason, st.Summary)
}

// waitProfileRan waits until a finished run of the sim has a profile step
// that was not skipped, and returns them.
func waitProfileRan(t *testing.T, s *stack, sm *sim, within time.Duration) (*runs.Run, *executor.StepRecord) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		for _, lr := range s.runs(t) {
			if lr.Labels["instance"] != sm.Addr || !finished(lr.Status) {
				continue
			}
			r := s.run(t, lr.ID)
			if st := stepByKind(r, "profile"); st != nil && st.Status != vocab.StatusSkipped {
				return r, st
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no run of %s ran its profile step within %s; alerts firing: %v", sm.Addr, within, s.Prom.Query(t, `ALERTS{alertstate="firing"}`))
		}
		time.Sleep(2 * time.Second)
	}
}

// waitProfiled waits for the sim's runs (alerts the stack's Alertmanager
// delivered) until one's profile step ran, then for every run of the sim to
// finish, and returns the one that captured. Exactly one may capture: any
// other run's profile step is skipped by the target's cooldown or lease.
func waitProfiled(t *testing.T, s *stack, sm *sim, within time.Duration) (*runs.Run, *executor.StepRecord) {
	t.Helper()
	waitProfileRan(t, s, sm, within)
	var run *runs.Run
	var prof *executor.StepRecord
	for _, lr := range waitAllFinished(t, s, 2*time.Minute) {
		if lr.Labels["instance"] != sm.Addr {
			continue
		}
		r := s.run(t, lr.ID)
		st := stepByKind(r, "profile")
		switch {
		case st == nil:
			t.Errorf("run without a profile step: %s", describe(r))
		case st.Status == vocab.StatusSucceeded && prof == nil:
			run, prof = r, st
		case st.Status == vocab.StatusSkipped:
			why := st.Reason + " " + st.Error
			if !strings.Contains(why, "cooldown") && !strings.Contains(why, "busy") {
				t.Errorf("a second capture was skipped, but not by the cooldown or the lease: %s", describe(r))
			}
			t.Logf("%s %s: profile skipped: %s", r.ID, r.Alertname, strings.TrimSpace(why))
		default:
			t.Errorf("profile step %s (want one succeeded, the rest skipped): %s\n%v", st.Status, describe(r), stepFindings(st))
		}
	}
	if prof == nil {
		t.Fatal("no run captured a profile")
	}
	return run, prof
}

// checkStoredProfile downloads what the step stored: every trace parses, and
// read again over the recorded frame they give the step's own analysis; the
// report names them; remove_after_upload emptied the agent's folder of them.
func checkStoredProfile(t *testing.T, st *executor.StepRecord, read func(string) []byte, agentDir string) *profile.Report {
	t.Helper()
	var rep *profile.Report
	var traces []*torchtrace.Report
	var bytesStored int64
	files := 0
	for _, a := range st.Artifacts {
		body := read(a.Key)
		if a.Name == "profile-report.json" {
			rep = new(profile.Report)
			if err := json.Unmarshal(body, rep); err != nil {
				t.Fatalf("%s: %v", a.Key, err)
			}
			continue
		}
		files++
		bytesStored += a.Size // as stored (text is compressed by the store); checkBucket checks it against the bucket
		if _, err := os.Stat(filepath.Join(agentDir, a.Name)); !os.IsNotExist(err) {
			t.Errorf("%s is still in the agent's folder after upload (remove_after_upload): %v", a.Name, err)
		}
		if !strings.HasSuffix(a.Name, ".json.gz") && !strings.HasSuffix(a.Name, ".json") {
			continue // the profiler's text summary
		}
		// The trace's own frame, unclipped: the step's bound is longer than
		// the recording (it is asserted unclipped in the caller).
		tr, err := torchtrace.Analyze(context.Background(), bytes.NewReader(body), torchtrace.Options{})
		if err != nil {
			t.Fatalf("stored trace %s (%d bytes) does not parse: %v", a.Key, len(body), err)
		}
		traces = append(traces, tr) // the CPU-side (async_llm) trace has no kernels: Merge adds nothing from it
	}
	if rep == nil || rep.Analysis == nil || len(traces) == 0 {
		t.Fatalf("profile step stored %d traces and report %v: %v", len(traces), rep != nil, st.Artifacts)
	}
	if len(rep.Files) != files || rep.Bytes != bytesStored {
		t.Errorf("profile-report.json lists %d files, %d bytes; the step stored %d, %d bytes", len(rep.Files), rep.Bytes, files, bytesStored)
	}
	mine := traces[0]
	if len(traces) > 1 {
		mine = torchtrace.Merge(traces...)
	}
	if mine.KernelUS <= 0 {
		t.Errorf("the stored traces hold no GPU kernel time in the frame")
	}
	for _, fam := range torchtrace.Families {
		if d := mine.Families[fam] - rep.Analysis.Families[fam]; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s share: the stored traces read %.4f, the step's report %.4f", fam, mine.Families[fam], rep.Analysis.Families[fam])
		}
	}
	t.Logf("stored: %d traces, %d bytes; read again: gemm %.0f%%, attention %.0f%%, idle %.0f%%, %d events",
		len(traces), bytesStored, 100*mine.Families[torchtrace.FamilyGEMM], 100*mine.Families[torchtrace.FamilyAttention], 100*mine.IdleShare, mine.Events)
	return rep
}

// checkRegressionDelta: the report compares with the baseline run, its
// baseline GEMM share is the one the baseline capture recorded, and GEMM's
// time relative to the rest grew as the injected regression says: its odds
// (share / (1 − share)) at least minGEMMOddsGain times the baseline's. With
// the sim's 8x GEMM slowdown and the other kernels as they were that ratio
// would be 8; the two sims' batches differ, hence the margin.
func checkRegressionDelta(t *testing.T, rep *profile.Report, base *executor.StepRecord, baseRun string) {
	t.Helper()
	if rep.Baseline == nil || rep.Baseline.RunID != baseRun || !rep.Baseline.Baseline {
		t.Fatalf("profile-report.json baseline %+v, want the kept baseline of run %s", rep.Baseline, baseRun)
	}
	fams, _ := base.Findings["families"].(map[string]any)
	baseGEMM, _ := fams[string(torchtrace.FamilyGEMM)].(float64)
	for _, d := range rep.Deltas {
		if d.Family != torchtrace.FamilyGEMM {
			continue
		}
		if diff := d.Baseline - baseGEMM; diff > 1e-9 || diff < -1e-9 {
			t.Errorf("gemm delta's baseline %.4f, the baseline capture recorded %.4f", d.Baseline, baseGEMM)
		}
		gain := (d.Share / (1 - d.Share)) / (d.Baseline / (1 - d.Baseline))
		if d.Share <= d.Baseline || gain < minGEMMOddsGain {
			t.Errorf("gemm %.3f against baseline %.3f: odds gain %.1f, want at least %.1f", d.Share, d.Baseline, gain, minGEMMOddsGain)
		}
		t.Logf("gemm %.1f%% of GPU time against the healthy baseline's %.1f%% (GEMM time / other time: %.1fx the baseline's)", 100*d.Share, 100*d.Baseline, gain)
		return
	}
	t.Errorf("no gemm delta in the report: %+v", rep.Deltas)
}

// minGEMMOddsGain is the least growth of GEMM time relative to the other
// kernels' that the unexplained scenario's 8x GEMM regression must show
// against a healthy capture (see checkRegressionDelta).
const minGEMMOddsGain = 3.0

func stepFindings(st *executor.StepRecord) map[string]any {
	if st == nil {
		return nil
	}
	return st.Findings
}

// findingsTime reads a time the step recorded in its findings.
func findingsTime(t testing.TB, st *executor.StepRecord, key string) time.Time {
	t.Helper()
	s, _ := st.Findings[key].(string)
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("profile findings %s = %v: %v", key, st.Findings[key], err)
	}
	return at
}
