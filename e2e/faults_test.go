package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vllmsim"
	"github.com/autocapture/autocapture/vocab"
)

// deadURL is an http URL on a loopback port nothing listens on.
func deadURL(t *testing.T) (url, hostport string) {
	t.Helper()
	hostport = fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	return "http://" + hostport, hostport
}

// deadPort is the reason a connection to a dead port carries: a network fact,
// never the allow-list's `refused`.
var deadPort = []string{string(vocab.ReasonUnreachable)}

// TestFaultPrometheusDown: the daemon's Prometheus is unreachable while the real
// Prometheus still evaluates the shipped rules and Alertmanager still delivers.
// Every run ends partial; each PromQL step (snapshot, charts) failed with a
// one-line reason naming the dead address; the scrape's evidence is kept on
// disk; triage still names the injected cause from the scrape alone.
func TestFaultPrometheusDown(t *testing.T) {
	t.Parallel()
	dead, deadAddr := deadURL(t)
	scenarios := []string{vllmsim.ScenarioOverload, vllmsim.ScenarioKVPressure}
	s := startStack(t, stackOptions{Scenarios: scenarios, PrometheusURL: dead})
	bySim := s.finishedRunsBySim(t, scenarios, 4*time.Minute)
	for _, sc := range scenarios {
		if len(bySim[sc]) == 0 {
			t.Errorf("%s: no run", sc)
		}
		for _, r := range bySim[sc] {
			checkPrometheusDownRun(t, s, r, sc, deadAddr)
		}
	}
}

func checkPrometheusDownRun(t *testing.T, s *stack, r *runs.Run, scenario, deadAddr string) {
	t.Helper()
	if r.Status != vocab.StatusPartial {
		t.Errorf("%s: run status %s, want partial: %s", scenario, r.Status, describe(r))
	}
	promSteps := append(stepsOfKind(r, "prometheus"), stepsOfKind(r, "chart")...)
	if len(promSteps) == 0 {
		t.Errorf("%s: no PromQL step in the run: %s", scenario, describe(r))
	}
	for _, st := range promSteps {
		checkOneLineFailure(t, r, st, deadPort, deadAddr)
		if !strings.Contains(r.Reason, st.ID) {
			t.Errorf("%s: run reason %q does not list failed step %s", scenario, r.Reason, st.ID)
		}
	}
	scrape := stepByKind(r, "scrape")
	switch {
	case scrape == nil:
		t.Errorf("%s: no scrape step: %s", scenario, describe(r))
	case scrape.Status != vocab.StatusSucceeded || len(scrape.Signals) == 0:
		t.Errorf("%s: scrape %s with %d signals, want succeeded with signals: %s", scenario, scrape.Status, len(scrape.Signals), describe(r))
	default:
		s.checkArtifactsKept(t, r, scrape, "scrape-1.txt", "scrape-2.txt")
	}
	tri := stepByKind(r, "triage")
	if tri == nil || tri.Status != vocab.StatusSucceeded {
		t.Errorf("%s: triage did not succeed: %s", scenario, describe(r))
		return
	}
	if r.Verdict == nil || r.Verdict.ID != scenario {
		t.Errorf("%s: verdict from the scrape alone: want %s: %s", scenario, scenario, describe(r))
		return
	}
	t.Logf("%s: %s → %s, partial: %s", scenario, r.Alertname, r.Verdict.ID, r.Reason)
}

// TestFaultTracesDown: the trace backend is unreachable. For the unexplained
// cause (the only verdict that escalates to tier 2) the traces step fails with a
// one-line reason naming the dead address, the run ends partial, and the tier-1
// evidence and the verdict are kept.
func TestFaultTracesDown(t *testing.T) {
	t.Parallel()
	dead, deadAddr := deadURL(t)
	scenarios := []string{vllmsim.ScenarioUnexplained}
	s := startStack(t, stackOptions{Scenarios: scenarios, TracesURL: dead})
	runs := s.finishedRunsBySim(t, scenarios, 4*time.Minute)[vllmsim.ScenarioUnexplained]
	if len(runs) == 0 {
		t.Fatal("no run for the unexplained instance")
	}
	for _, r := range runs {
		if r.Status != vocab.StatusPartial {
			t.Errorf("run status %s, want partial: %s", r.Status, describe(r))
		}
		tr := stepByKind(r, "traces")
		if tr == nil {
			t.Errorf("no traces step: %s", describe(r))
			continue
		}
		checkOneLineFailure(t, r, tr, deadPort, deadAddr)
		for _, kind := range []string{"prometheus", "scrape", "chart"} {
			for _, st := range stepsOfKind(r, kind) {
				if st.Status != vocab.StatusSucceeded {
					t.Errorf("tier-1 step %s %s (%s %s), want succeeded", st.ID, st.Status, st.Reason, st.Error)
					continue
				}
				s.checkArtifactsKept(t, r, st)
			}
		}
		if r.Verdict == nil || r.Verdict.ID != vocab.VerdictUnexplained {
			t.Errorf("verdict: want unexplained kept: %s", describe(r))
			continue
		}
		t.Logf("%s → %s, partial: %s; traces: %s", r.Alertname, r.Verdict.ID, r.Reason, tr.Error)
	}
}

// The query-timeout playbook: a snapshot whose one expensive query (the queue's
// peak over an hour at millisecond resolution: 3.6 million subquery steps) has a
// 100 ms budget beside ordinary queries, and a step holding only that query under
// a 300 ms step deadline; then the scrape and triage.
const queryTimeoutPlaybook = `playbooks:
  - name: e2e-query-timeout
    match: ['alertname="VLLMQueueDeep"']
    timeout: 2m
    vars:
      sel: 'instance={{ .Labels.instance | promQuote }}'
    steps:
      - id: snapshot
        timeout: 30s
        continue_on_error: true
        prometheus:
          queries:
            - {name: queue, signal: queue_depth, query: 'sum(vllm:num_requests_waiting{ {{- .Vars.sel -}} })'}
            - {name: running, signal: running, query: 'sum(vllm:num_requests_running{ {{- .Vars.sel -}} })'}
            - {name: queue_time, signal: queue_time_mean, query: 'sum(rate(vllm:request_queue_time_seconds_sum{ {{- .Vars.sel -}} }[2m])) / sum(rate(vllm:request_queue_time_seconds_count{ {{- .Vars.sel -}} }[2m]))'}
            - {name: prefill_time, signal: prefill_time_mean, query: 'sum(rate(vllm:request_prefill_time_seconds_sum{ {{- .Vars.sel -}} }[2m])) / sum(rate(vllm:request_prefill_time_seconds_count{ {{- .Vars.sel -}} }[2m]))'}
            - name: queue_peak_fine
              timeout: 100ms
              query: 'max_over_time(sum(vllm:num_requests_waiting{ {{- .Vars.sel -}} })[1h:1ms])'
      - id: peak_only
        timeout: 300ms
        continue_on_error: true
        prometheus:
          queries:
            - name: queue_peak_fine
              query: 'max_over_time(sum(vllm:num_requests_waiting{ {{- .Vars.sel -}} })[1h:1ms])'
      - id: scrape
        timeout: 20s
        continue_on_error: true
        scrape: {gap: 3s}
      - id: triage
        triage: {from: [snapshot, scrape]}
`

// TestFaultQueryTimeout: a PromQL query that really takes longer than its budget
// against the real Prometheus. Inside a step, the timed-out query is reported
// (findings.failed, the summary) and the step's other queries keep their
// results; a step whose deadline passes fails with reason timeout in one line
// saying which deadline; the run ends partial and the verdict stands.
func TestFaultQueryTimeout(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pb := filepath.Join(dir, "query-timeout.yaml")
	if err := os.WriteFile(pb, []byte(queryTimeoutPlaybook), 0o644); err != nil {
		t.Fatal(err)
	}
	scenarios := []string{vllmsim.ScenarioOverload}
	s := startStack(t, stackOptions{Scenarios: scenarios, DaemonConfig: "playbooks: [" + pb + "]\nshipped_playbooks: false\n"})
	var r *runs.Run
	for _, x := range s.finishedRunsBySim(t, scenarios, 4*time.Minute)[vllmsim.ScenarioOverload] {
		if x.Alertname == "VLLMQueueDeep" {
			r = x
		}
	}
	if r == nil {
		t.Fatal("no VLLMQueueDeep run for the overload instance")
	}
	if r.Status != vocab.StatusPartial || !strings.Contains(r.Reason, "peak_only (timeout)") {
		t.Errorf("run status %s reason %q, want partial for peak_only (timeout): %s", r.Status, r.Reason, describe(r))
	}
	checkSnapshotKeptTheRest(t, r)
	peak := stepByID(r, "peak_only")
	checkOneLineFailure(t, r, peak, []string{string(vocab.ReasonTimeout)}, "ran longer than its timeout 300ms")
	if sc := stepByID(r, "scrape"); sc.Status != vocab.StatusSucceeded {
		t.Errorf("scrape %s, want succeeded: %s", sc.Status, describe(r))
	}
	if r.Verdict == nil || r.Verdict.ID != vocab.VerdictOverload {
		t.Errorf("verdict: want overload: %s", describe(r))
	}
	t.Logf("snapshot: %s", stepByID(r, "snapshot").Summary)
	t.Logf("peak_only: %s: %s", peak.Reason, peak.Error)
}

// checkSnapshotKeptTheRest: the snapshot succeeded, its expensive query is
// listed as timed out, and every other query answered with a value and signal.
func checkSnapshotKeptTheRest(t *testing.T, r *runs.Run) {
	t.Helper()
	snap := stepByID(r, "snapshot")
	if snap.Status != vocab.StatusSucceeded {
		t.Errorf("snapshot %s (%s), want succeeded with one query failed: %s", snap.Status, snap.Error, describe(r))
		return
	}
	failed, _ := snap.Findings["failed"].(map[string]any)
	why, _ := failed["queue_peak_fine"].(string)
	if len(failed) != 1 || !strings.HasPrefix(why, "timeout: ") || strings.ContainsAny(why, "\r\n") {
		t.Errorf("snapshot findings.failed = %v, want only queue_peak_fine with one timeout line", snap.Findings["failed"])
	}
	if !strings.Contains(snap.Summary, "1 failed (queue_peak_fine timeout)") {
		t.Errorf("snapshot summary %q does not report the timed-out query", snap.Summary)
	}
	for _, q := range []string{"queue", "running", "queue_time", "prefill_time"} {
		if _, ok := snap.Findings[q]; !ok {
			t.Errorf("snapshot lost query %s: findings %v", q, snap.Findings)
		}
	}
	for _, sig := range []string{vocab.SigQueueDepth, vocab.SigRunning, vocab.SigQueueTimeMean} {
		if _, ok := snap.Signals[sig]; !ok {
			t.Errorf("snapshot lost signal %s: %v", sig, snap.Signals)
		}
	}
}

// stepByID returns the run's step with that id, or an empty failed-looking
// record so callers report instead of panicking.
func stepByID(r *runs.Run, id string) *executor.StepRecord {
	for i := range r.Steps {
		if r.Steps[i].ID == id {
			return &r.Steps[i]
		}
	}
	return &executor.StepRecord{ID: id, Status: "missing"}
}
