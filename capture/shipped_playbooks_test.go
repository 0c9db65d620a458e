package capture_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/capture"
	"github.com/autocapture/autocapture/internal/testenv"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vllmsim"
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
	set, err := playbooks.Load(nil, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	instances := map[string]string{}
	var targets []string
	for scenario := range alertFor {
		sim, err := vllmsim.New(vllmsim.Options{Scenario: scenario, Seed: 11, Start: time.Now().Add(-3 * time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- sim.Run(ctx) }()
		srv := httptest.NewServer(sim.Handler())
		t.Cleanup(func() { srv.Close(); cancel(); <-done })
		u, _ := url.Parse(srv.URL)
		instances[scenario] = u.Host
		targets = append(targets, u.Host)
	}
	prom := testenv.StartPrometheus(t, testenv.PrometheusOptions{ScrapeTargets: targets})
	for _, inst := range targets {
		prom.WaitUp(t, inst, 30*time.Second)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		if s := prom.Query(t, "min(count_over_time(up[1m]))"); len(s) == 1 && s[0].Value >= 5 {
			break // a few scrapes of every target, for the rates
		}
		if time.Now().After(deadline) {
			t.Fatal("prometheus has fewer than 5 scrapes of some target")
		}
	}
	store, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	env := &capture.Env{Store: store, Targets: &http.Client{}, Prometheus: &capture.Endpoint{URL: prom.URL, Timeout: 10 * time.Second}}
	for scenario, alertname := range alertFor {
		t.Run(scenario, func(t *testing.T) {
			t.Parallel()
			now := time.Now()
			alert := template.Alert{Status: "firing", StartsAt: now.Add(-time.Minute), Fingerprint: scenario,
				Labels: template.KV{"alertname": alertname, "instance": instances[scenario], "model_name": "m", "severity": "page"}}
			plans, err := set.Plan(alert, capture.Window{Start: now.Add(-10 * time.Minute), End: now})
			if err != nil || len(plans) != 1 {
				t.Fatalf("plans %v, %v", plans, err)
			}
			prior := runTier(t, plans[0], capture.TierMetrics, alert, env, nil)
			if f := prior["snapshot"].Findings["failed"]; f != nil {
				t.Fatalf("shipped queries failed: %v", f)
			}
			out := runTier(t, plans[0], capture.TierTriage, alert, env, prior)["triage"]
			if out.Verdict.ID != scenario {
				t.Fatalf("verdict %s %v, want %s\nsignals %v\nevidence %q", out.Verdict.ID, out.Verdict.Contributing,
					scenario, out.Signals, out.Verdict.Evidence)
			}
		})
	}
}

// runTier runs a plan's steps of one tier in parallel, as the runner does, each
// under its own timeout, and fails the test on any step error.
func runTier(t *testing.T, plan *playbooks.Plan, tier capture.Tier, alert template.Alert, env *capture.Env, prior map[string]*capture.Result) map[string]*capture.Result {
	t.Helper()
	out := map[string]*capture.Result{}
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
			in := &capture.Input{RunID: "e2e-" + alert.Fingerprint, StepID: ps.ID, Alert: alert, Prior: prior, Env: env,
				Window: capture.Window{Start: time.Now().Add(-10 * time.Minute), End: time.Now()}, Log: zap.NewNop()}
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
