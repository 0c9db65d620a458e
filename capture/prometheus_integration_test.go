package capture

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/internal/testenv"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vllmsim"
)

// simUnderPrometheus runs a stand-in vLLM in real time (three simulated minutes
// already behind it, so the scenario has shown) and a real Prometheus scraping
// it every second, and waits until Prometheus has a few scrapes.
func simUnderPrometheus(tb testing.TB, scenario string, legacy bool) (inst string, prom *testenv.Prometheus) {
	tb.Helper()
	sim, err := vllmsim.New(vllmsim.Options{Scenario: scenario, Seed: 3, LegacyMetrics: legacy,
		Start: time.Now().Add(-3 * time.Minute)})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sim.Run(ctx) }()
	srv := httptest.NewServer(sim.Handler())
	tb.Cleanup(func() { srv.Close(); cancel(); <-done })
	u, _ := url.Parse(srv.URL)
	inst = u.Host
	prom = testenv.StartPrometheus(tb, testenv.PrometheusOptions{ScrapeTargets: []string{inst}})
	prom.WaitUp(tb, inst, 30*time.Second)
	q := fmt.Sprintf("count_over_time(up{instance=%q}[1m])", inst)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		if s := prom.Query(tb, q); len(s) == 1 && s[0].Value >= 5 {
			return inst, prom
		}
		if time.Now().After(deadline) {
			tb.Fatalf("prometheus has fewer than 5 scrapes of %s", inst)
		}
	}
}

// snapshotQueries is the tier-1 PromQL picture the shipped playbooks take, for
// one instance, over both metric generations.
func snapshotQueries(inst string) []PromQuery {
	sel := fmt.Sprintf(`{instance=%q}`, inst)
	mean := func(h string) string {
		return fmt.Sprintf("sum(rate(%s_sum%s[5m])) / sum(rate(%s_count%s[5m]))", h, sel, h, sel)
	}
	q := func(name, sig, expr string) PromQuery { return PromQuery{Name: name, Signal: sig, Query: expr} }
	return []PromQuery{
		q("queue", SigQueueDepth, "sum(vllm:num_requests_waiting"+sel+")"),
		q("running", SigRunning, "sum(vllm:num_requests_running"+sel+")"),
		q("kv", SigKVUsage, fmt.Sprintf("max(max_over_time(vllm:kv_cache_usage_perc%s[2m]) or max_over_time(vllm:gpu_cache_usage_perc%s[2m]))", sel, sel)),
		q("preemptions", SigPreemptionsRate, "sum(rate(vllm:num_preemptions_total"+sel+"[5m]))"),
		q("ttft_p99", SigTTFTP99, "histogram_quantile(0.99, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket"+sel+"[5m])))"),
		q("itl_p99", SigITLP99, fmt.Sprintf("histogram_quantile(0.99, sum by (le) (rate(vllm:inter_token_latency_seconds_bucket%s[5m]) or rate(vllm:time_per_output_token_seconds_bucket%s[5m])))", sel, sel)),
		q("queue_time", SigQueueTimeMean, mean("vllm:request_queue_time_seconds")),
		q("prefill_time", SigPrefillMean, mean("vllm:request_prefill_time_seconds")),
		q("prompt_tokens", SigPromptTokens, mean("vllm:request_prompt_tokens")),
		q("abort_ratio", SigAbortRatio, fmt.Sprintf(`sum(rate(vllm:request_success_total{instance=%q,finished_reason="abort"}[5m])) / sum(rate(vllm:request_success_total%s[5m]))`, inst, sel)),
		{Name: "queue_history", Query: "sum(vllm:num_requests_waiting" + sel + ")", Range: true},
	}
}

func TestPrometheusStepAgainstRealPrometheus(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		t.Run(fmt.Sprintf("overload legacy=%v", legacy), func(t *testing.T) {
			inst, prom := simUnderPrometheus(t, vllmsim.ScenarioOverload, legacy)
			qs := append(snapshotQueries(inst), PromQuery{Name: "cut_short", Query: "up", Timeout: time.Nanosecond})
			step, err := NewPrometheus(PrometheusConfig{Queries: qs})
			if err != nil {
				t.Fatal(err)
			}
			in := promInput(t, prom.URL)
			in.Window = Window{Start: time.Now().Add(-time.Minute), End: time.Now()}
			res, err := step.Run(context.Background(), in)
			if err != nil {
				t.Fatal(err)
			}
			if f := res.Findings["failed"].(map[string]string); len(f) != 1 || !strings.HasPrefix(f["cut_short"], "timeout: query cut_short: no answer within 1ns") {
				t.Fatalf("failed = %v", f)
			}
			for _, s := range []string{SigQueueDepth, SigRunning, SigKVUsage, SigTTFTP99, SigITLP99, SigPrefillMean, SigPromptTokens} {
				if _, ok := res.Signals[s]; !ok {
					t.Errorf("signal %s missing (both generations must be read): %v", s, res.Signals)
				}
			}
			if h := res.Findings["queue_history"].([]seriesSummary); len(h) != 1 || h[0].Points < 5 {
				t.Fatalf("queue history %+v", h)
			}
			v := Diagnose(res.Signals, DefaultThresholds)
			if v.ID != VerdictOverload {
				t.Fatalf("PromQL alone: verdict %s, want overload; signals %v; evidence %q", v.ID, res.Signals, v.Evidence)
			}
		})
	}
}

// TestPrometheusDownTriageAnswersFromTheScrape is the fault the issue names:
// Prometheus unreachable, so the prometheus step fails and says why in one line,
// while the scrape's evidence stands and triage still reaches the cause.
func TestPrometheusDownTriageAnswersFromTheScrape(t *testing.T) {
	sim, err := vllmsim.New(vllmsim.Options{Scenario: vllmsim.ScenarioKVPressure, Seed: 5, Start: time.Unix(1.8e9, 0)})
	if err != nil {
		t.Fatal(err)
	}
	sim.Advance(3 * time.Minute)
	target := httptest.NewServer(sim.Handler())
	defer target.Close()
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	store, _ := storage.NewLocal(t.TempDir())
	u, _ := url.Parse(target.URL)
	env := &Env{Store: store, Targets: target.Client(), Now: sim.Now,
		Prometheus: &Endpoint{URL: down.URL, Timeout: time.Second}}
	alert := template.Alert{Labels: template.KV{"alertname": "VLLMKVCachePressure", "instance": u.Host}}
	in := func(id string) *Input {
		return &Input{RunID: "r", StepID: id, Alert: alert, Env: env, Window: Window{Start: sim.Now().Add(-time.Hour), End: sim.Now()}}
	}
	prom, _ := NewPrometheus(PrometheusConfig{Queries: snapshotQueries(u.Host)})
	_, perr := prom.Run(context.Background(), in("snapshot"))
	if Classify(perr) != ReasonUnreachable || strings.Contains(perr.Error(), "\n") {
		t.Fatalf("prometheus down: %v (%s)", perr, Classify(perr))
	}
	scrape, _ := NewScrape(ScrapeConfig{Gap: 10 * time.Second})
	scrape.sleep = func(_ context.Context, d time.Duration) error { sim.Advance(d); return nil }
	sres, err := scrape.Run(context.Background(), in("scrape"))
	if err != nil {
		t.Fatal(err)
	}
	tri, _ := NewTriage(TriageConfig{})
	out, _ := tri.Run(context.Background(), &Input{Prior: map[string]*Result{"scrape": sres}}) // the failed step left no result
	if out.Verdict.ID != VerdictKVPressure || out.Findings["sources"].([]string)[0] != "scrape" {
		t.Fatalf("verdict %+v from %v", out.Verdict, out.Findings["sources"])
	}
}
