package capture_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vllmsim"
	"github.com/autocapture/autocapture/vocab"
)

// alertFor is the shipped alert each simulated cause typically raises.
var alertFor = map[string]string{
	vllmsim.ScenarioHealthy:      "VLLMHighTTFT", // a flapping alert
	vllmsim.ScenarioOverload:     "VLLMQueueDeep",
	vllmsim.ScenarioKVPressure:   "VLLMKVCachePressure",
	vllmsim.ScenarioPrefillBound: "VLLMHighTTFT",
	vllmsim.ScenarioDecodeBound:  "VLLMHighITL",
	vllmsim.ScenarioClientAborts: "VLLMHighAbortRatio",
	vllmsim.ScenarioUnexplained:  "VLLMHighITL",
}

// TestShippedPlaybooksTier1AgainstRealPrometheus plans the embedded playbooks for
// each simulated cause, runs their tier-1 steps against a real Prometheus and the
// stand-in vLLM (in real time), and triages: every shipped PromQL query must
// parse and answer, every chart render, and the verdict name the injected cause.
func TestShippedPlaybooksTier1AgainstRealPrometheus(t *testing.T) {
	t.Parallel() // waits on real time and a Prometheus of its own
	set, err := playbooks.Load(playbooks.Shipped, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	var fleet []simInstance
	for scenario := range alertFor {
		fleet = append(fleet, simInstance{scenario: scenario, seed: 11})
	}
	targets, promURL, _ := fleetUnderPrometheus(t, fleet)
	instances := map[string]string{}
	for i, f := range fleet {
		instances[f.scenario] = targets[i]
	}
	env := promEnv(t, promURL)
	for scenario, alertname := range alertFor {
		t.Run(scenario, func(t *testing.T) {
			t.Parallel()
			now := time.Now()
			alert := template.Alert{Status: "firing", StartsAt: now.Add(-time.Minute), Fingerprint: scenario,
				Labels: template.KV{"alertname": alertname, "instance": instances[scenario], "model_name": "m", "severity": "page"}}
			plans, err := set.Plan(alert, vocab.Window{Start: now.Add(-10 * time.Minute), End: now})
			if err != nil || len(plans) != 1 {
				t.Fatalf("plans %v, %v", plans, err)
			}
			prior := runTier(t, plans[0], vocab.TierMetrics, alert, env, nil)
			if f := prior["snapshot"].Findings["failed"]; f != nil {
				t.Fatalf("shipped queries failed: %v", f)
			}
			out := runTier(t, plans[0], vocab.TierTriage, alert, env, prior)["triage"]
			if out.Verdict.ID != scenario {
				t.Fatalf("verdict %s %v, want %s\nsignals %v\nevidence %q", out.Verdict.ID, out.Verdict.Contributing,
					scenario, out.Signals, out.Verdict.Evidence)
			}
		})
	}
}

// runTier runs a plan's steps of one tier in parallel, as the runner does, each
// under its own timeout, and fails the test on any step error.
func runTier(t *testing.T, plan *playbooks.Plan, tier vocab.Tier, alert template.Alert, env *vocab.Env, prior map[string]*vocab.Result) map[string]*vocab.Result {
	t.Helper()
	out := map[string]*vocab.Result{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, ps := range plan.Steps {
		if ps.Tier != tier {
			continue
		}
		if ps.RenderErr != nil {
			t.Fatalf("step %s: %v", ps.ID, ps.RenderErr)
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), ps.Timeout)
			defer cancel()
			in := &vocab.Input{RunID: "e2e-" + alert.Fingerprint, StepID: ps.ID, Alert: alert, Prior: prior, Env: env,
				Window: vocab.Window{Start: time.Now().Add(-10 * time.Minute), End: time.Now()}, Log: zap.NewNop()}
			res, err := ps.Step.Run(ctx, in)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("step %s (%s): %v", ps.ID, ps.Kind, err)
				return
			}
			out[ps.ID] = res
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return out
}

// TestShippedPlaybookOverloadAtOnset is the page at the very start of an
// overload, through the real path: vllmsim serves healthy traffic (real time)
// while a real Prometheus scrapes it, then switches to overload; the moment
// VLLMQueueDeep's condition first holds in Prometheus (`for: 0s`), the shipped
// queue-deep playbook's snapshot and scrape run against them and its triage
// must say overload. The 2m lifecycle histograms then still hold the healthy
// minutes and none of the requests stuck in the queue.
func TestShippedPlaybookOverloadAtOnset(t *testing.T) {
	t.Parallel() // waits on real time and a Prometheus of its own
	set, err := playbooks.Load(playbooks.Shipped, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	sim, err := vllmsim.New(vllmsim.Options{Scenario: vllmsim.ScenarioHealthy, Seed: 11})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sim.Run(ctx) }()
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(func() { srv.Close(); cancel(); <-done })
	u, _ := url.Parse(srv.URL)
	inst := u.Host
	prom := testenv.StartPrometheus(t, testenv.PrometheusOptions{ScrapeTargets: []string{inst}})
	prom.WaitUp(t, inst, 30*time.Second)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		if s := prom.Query(t, "count_over_time(up[1m])"); len(s) == 1 && s[0].Value >= 20 {
			break // 20 s of healthy history in the rate windows
		}
		if time.Now().After(deadline) {
			t.Fatal("prometheus has fewer than 20 scrapes after a minute")
		}
	}
	if err := sim.SetScenario(vllmsim.ScenarioOverload); err != nil {
		t.Fatal(err)
	}
	switched := time.Now()
	rule := fmt.Sprintf(`max by (model_name, instance) (vllm:num_requests_waiting{instance=%q}) > 10`, inst)
	for len(prom.Query(t, rule)) == 0 {
		if time.Since(switched) > 60*time.Second {
			t.Fatal("VLLMQueueDeep's condition did not hold within a minute of the switch")
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("the alert can fire %s after the switch", time.Since(switched).Round(100*time.Millisecond))
	store, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	env := &vocab.Env{Store: store, Targets: &http.Client{}, Prometheus: &vocab.Endpoint{URL: prom.URL, Timeout: 10 * time.Second}}
	now := time.Now()
	alert := template.Alert{Status: "firing", StartsAt: now, Fingerprint: "onset",
		Labels: template.KV{"alertname": "VLLMQueueDeep", "instance": inst, "model_name": "m", "severity": "page"}}
	plans, err := set.Plan(alert, vocab.Window{Start: now.Add(-10 * time.Minute), End: now})
	if err != nil || len(plans) != 1 {
		t.Fatalf("plans %v, %v", plans, err)
	}
	prior := runTier(t, plans[0], vocab.TierMetrics, alert, env, nil)
	if f := prior["snapshot"].Findings["failed"]; f != nil {
		t.Fatalf("shipped queries failed: %v", f)
	}
	out := runTier(t, plans[0], vocab.TierTriage, alert, env, prior)["triage"]
	snap := prior["snapshot"].Signals
	t.Logf("snapshot findings queue=%v running=%v; scrape %v", prior["snapshot"].Findings["queue"], prior["snapshot"].Findings["running"], prior["scrape"].Summary)
	t.Logf("snapshot: queue %v, queue time %v vs prefill %v, admitted %v/s; verdict %s %v\n%q", snap[vocab.SigQueueDepth],
		snap[vocab.SigQueueTimeMean], snap[vocab.SigPrefillMean], snap[vocab.SigAdmitRate], out.Verdict.ID, out.Verdict.Contributing, out.Verdict.Evidence)
	if out.Verdict.ID != vocab.VerdictOverload {
		t.Fatalf("verdict %s %v, want overload\nsignals %v\nevidence %q", out.Verdict.ID, out.Verdict.Contributing, out.Signals, out.Verdict.Evidence)
	}
	for _, line := range out.Verdict.Evidence {
		if strings.Contains(line, "normal") {
			t.Errorf("evidence calls something normal beside a deep queue: %q", line)
		}
	}
	if _, ok := out.Signals[vocab.SigQueueWait]; !ok {
		t.Errorf("no current wait derived: %v", out.Signals)
	}
	org, _ := out.Findings["origins"].(map[string]vocab.Origin)
	if o := org[vocab.SigAdmitRate]; o.Source == "" || o.Window <= 0 {
		t.Errorf("admit_rate's origin %+v: want its source and window", o)
	}
}
