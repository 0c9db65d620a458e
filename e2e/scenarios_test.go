package e2e

import (
	"context"
	"io"
	"math"
	"sort"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/prometheus/alertmanager/template"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/internal/testkit/manifestcheck"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vllmsim"
	"github.com/autocapture/autocapture/vocab"
)

// TestVerdictPerInjectedCause is the product's bar: for each cause vllmsim injects,
// the shipped rules fire, Alertmanager delivers, the shipped playbooks run, and
// every run's primary verdict is that cause; the healthy instance fires nothing;
// tier 2 runs exactly when the verdict is unexplained, and returns the truly
// slowest requests of the window.
func TestVerdictPerInjectedCause(t *testing.T) {
	t.Parallel()
	bucket := testenv.StartMinIO(t) // the artifacts go to a real S3 server: checkBucket
	s, all := verdictPerInjectedCause(t, "", bucket)
	checkBucket(t, s, bucket, all)
}

// verdictPerInjectedCause is TestVerdictPerInjectedCause's proof for sims of
// one variant (a stackOptions scenario suffix: "" for vLLM, sglangSuffix),
// with the artifacts in bucket (nil: the local backend). It returns the stack
// and the runs it judged.
func verdictPerInjectedCause(t *testing.T, variant string, bucket *testenv.S3Server) (*stack, []runs.Run) {
	t.Helper()
	var scenarios []string
	for _, c := range []string{
		vllmsim.ScenarioHealthy, vllmsim.ScenarioOverload, vllmsim.ScenarioKVPressure,
		vllmsim.ScenarioPrefillBound, vllmsim.ScenarioDecodeBound, vllmsim.ScenarioClientAborts,
		vllmsim.ScenarioUnexplained,
	} {
		scenarios = append(scenarios, c+variant)
	}
	s := startStack(t, stackOptions{Scenarios: scenarios, S3: bucket})
	byAddr := map[string]string{}
	for sc, sm := range s.Sims {
		byAddr[sm.Addr] = sc
	}

	// Wait until every injected cause has at least one finished run, then a little
	// longer so runs already accepted finish too.
	deadline := time.Now().Add(4 * time.Minute)
	var all []runs.Run
	for {
		all = s.runs(t)
		if allCausesDone(all, byAddr, scenarios[1:]) || time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Second)
	}
	all = waitAllFinished(t, s, 60*time.Second)

	seen := map[string]int{}
	for _, lr := range all {
		sc := byAddr[lr.Labels["instance"]]
		cause, _ := simVariant(sc)
		r := s.run(t, lr.ID)
		if sc == "" {
			t.Errorf("run for an unknown instance: %s", describe(r))
			continue
		}
		if cause == vllmsim.ScenarioHealthy {
			t.Errorf("healthy instance fired %s: %s", r.Alertname, describe(r))
			continue
		}
		seen[sc]++
		if r.Verdict == nil || r.Verdict.ID != cause {
			t.Errorf("%s: want verdict %s, got %s", sc, cause, describe(r))
			continue
		}
		checkTier2(t, s, r, s.Sims[sc])
		if st := stepByKind(r, "profile"); st != nil && st.Status != vocab.StatusSkipped {
			t.Logf("%s: tier 3 (the sims' profilers are unarmed): run %s, profile %s %s: %s %s | %v", sc, r.Status, st.Status, st.Reason, st.Summary, st.Error, st.Findings)
		}
		t.Logf("%s: %s → %s in %s (contributing %v)", sc, r.Alertname, r.Verdict.ID, runTook(r), r.Verdict.Contributing)
	}
	for _, sc := range scenarios[1:] {
		if seen[sc] == 0 {
			t.Errorf("%s: no run; alerts firing now: %v", sc, s.Prom.Query(t, `ALERTS{alertstate="firing"}`))
		}
	}
	return s, all
}

func allCausesDone(all []runs.Run, byAddr map[string]string, scenarios []string) bool {
	done := map[string]bool{}
	for _, r := range all {
		if finished(r.Status) {
			done[byAddr[r.Labels["instance"]]] = true
		}
	}
	for _, sc := range scenarios {
		if sc != vllmsim.ScenarioHealthy && !done[sc] {
			return false
		}
	}
	return true
}

// waitAllFinished waits until every run is final and returns that list. The
// rules keep firing meanwhile (a cause outlasts its first alert), so a run
// created after the list was read is not in it: callers judge this list,
// never a later read that may hold a run that has only just begun.
func waitAllFinished(t *testing.T, s *stack, within time.Duration) []runs.Run {
	t.Helper()
	deadline := time.Now().Add(within)
	var all []runs.Run
	for time.Now().Before(deadline) {
		all = s.runs(t)
		pending := 0
		for _, r := range all {
			if !finished(r.Status) {
				pending++
			}
		}
		if pending == 0 {
			return all
		}
		time.Sleep(time.Second)
	}
	t.Errorf("runs still unfinished after %s", within)
	return all
}

func runTook(r *runs.Run) time.Duration {
	if r.FinishedAt == nil {
		return 0
	}
	return r.FinishedAt.Sub(r.CreatedAt).Round(100 * time.Millisecond)
}

// checkTier2: the traces step runs exactly when its playbook's `when` says so,
// evaluated here on the run's own recorded results; when it ran, its trace ids
// are the slowest requests of the window per the sim's own record.
func checkTier2(t *testing.T, s *stack, r *runs.Run, sm *sim) {
	t.Helper()
	st := stepByKind(r, "traces")
	if st == nil {
		t.Errorf("%s: run has no traces step: %s", sm.Scenario, describe(r))
		return
	}
	want := whenHolds(t, r, st)
	switch {
	case !want && st.Status != "skipped":
		t.Errorf("%s: traces step %s, want skipped by when: %s", sm.Scenario, st.Status, describe(r))
	case want && st.Status != "succeeded":
		t.Errorf("%s: traces step %s, want succeeded: %s", sm.Scenario, st.Status, describe(r))
	case want:
		checkSlowest(t, r, st, sm.requests(t))
	}
}

// whenHolds evaluates the shipped playbook's compiled `when` of step st over the
// results the run recorded for the steps before it.
func whenHolds(t *testing.T, r *runs.Run, st *executor.StepRecord) bool {
	t.Helper()
	set, err := playbooks.Load(playbooks.Shipped, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	alert := template.Alert{Status: "firing", Labels: r.Labels, Annotations: r.Annotations, StartsAt: r.StartsAt, Fingerprint: r.Fingerprint}
	plans, err := set.Plan(alert, vocab.Window{Start: r.StartsAt.Add(-10 * time.Minute), End: r.CreatedAt})
	if err != nil {
		t.Fatal(err)
	}
	prior := map[string]*vocab.Result{}
	for _, rec := range r.Steps {
		if rec.Plan == st.Plan && rec.Tier < st.Tier && rec.Status == "succeeded" {
			prior[rec.ID] = rec.Result()
		}
	}
	for _, p := range plans {
		if p.Playbook != st.Plan {
			continue
		}
		for _, ps := range p.Steps {
			if ps.ID == st.ID {
				if ps.When == nil {
					return true
				}
				ok, err := ps.When.Eval(alert, prior)
				if err != nil {
					t.Fatalf("when of %s/%s: %v", p.Playbook, ps.ID, err)
				}
				return ok
			}
		}
	}
	t.Fatalf("no step %s/%s in the shipped playbooks", st.Plan, st.ID)
	return false
}

// checkSlowest compares the step's ranking with the sim's finished requests: every
// id is a real request of this sim, and no request of the window that was surely
// exported before the search ranks above the slowest one returned.
func checkSlowest(t *testing.T, r *runs.Run, st *executor.StepRecord, reqs []vllmsim.FinishedRequest) {
	t.Helper()
	rankBy, _ := st.Findings["rank_by"].(string)
	raw, _ := st.Findings["slowest"].([]any)
	if len(raw) == 0 {
		t.Errorf("traces step found nothing: %v", st.Findings)
		return
	}
	byTrace := map[string]vllmsim.FinishedRequest{}
	for _, q := range reqs {
		byTrace[q.TraceID] = q
	}
	returned := map[string]bool{}
	minRank := math.Inf(1)
	for _, x := range raw {
		m, _ := x.(map[string]any)
		id, _ := m["trace_id"].(string)
		q, ok := byTrace[id]
		if !ok {
			t.Errorf("trace %s is not a request of this sim", id)
			continue
		}
		returned[id] = true
		minRank = math.Min(minRank, rankValue(q, rankBy))
	}
	// Spans leave the sim in batches: only requests finished well before the
	// search are surely in Jaeger.
	surely := st.StartedAt.Add(-8 * time.Second)
	var missed []float64
	for _, q := range reqs {
		if returned[q.TraceID] || q.Finished.After(surely) || q.Arrival.Before(r.StartsAt.Add(-10*time.Minute)) {
			continue
		}
		if v := rankValue(q, rankBy); v > minRank+1e-6 {
			missed = append(missed, v)
		}
	}
	sort.Float64s(missed)
	if len(missed) > 0 {
		t.Errorf("traces ranked by %s missed %d slower requests (slowest missed %.3fs > returned minimum %.3fs)",
			rankBy, len(missed), missed[len(missed)-1], minRank)
	}
}

func rankValue(q vllmsim.FinishedRequest, by string) float64 {
	switch by {
	case "ttft":
		return q.TTFT
	case "queue":
		return q.Queue
	case "prefill":
		return q.Prefill
	case "decode":
		return q.Decode
	}
	return q.E2E
}

// checkBucket checks, for every finished run, what the end-to-end
// proof asks of the s3 backend (manifestcheck.Check): each artifact the runs
// API lists is in the bucket under the documented layout, and the run's
// manifest gives the stored objects' sha256 and size.
func checkBucket(t *testing.T, s *stack, srv *testenv.S3Server, all []runs.Run) {
	t.Helper()
	ctx := context.Background()
	client := srv.Client()
	read := func(key string) ([]byte, string, error) {
		obj, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(srv.Bucket), Key: aws.String(s3Prefix + "/" + key)})
		if err != nil {
			return nil, "", err
		}
		defer obj.Body.Close()
		b, err := io.ReadAll(obj.Body)
		return b, aws.ToString(obj.ContentEncoding), err
	}
	checked := 0
	for _, lr := range all {
		if !finished(lr.Status) {
			continue
		}
		r := s.run(t, lr.ID)
		for deadline := time.Now().Add(30 * time.Second); r.Manifest == "" && time.Now().Before(deadline); r = s.run(t, lr.ID) {
			time.Sleep(200 * time.Millisecond)
		}
		checked += manifestcheck.Check(t, r, read)
	}
	if checked == 0 {
		t.Fatal("no artifact checked in the bucket: the test proves nothing")
	}
	t.Logf("s3: %d artifacts of %d runs in the bucket under the layout, each as its manifest says", checked, len(all))
}
