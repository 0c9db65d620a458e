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

	"github.com/autocapture/autocapture/capture/internal/promkit"
	"github.com/autocapture/autocapture/capture/prometheus"
	"github.com/autocapture/autocapture/capture/scrape"
	"github.com/autocapture/autocapture/capture/triage"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vllmsim"
	"github.com/autocapture/autocapture/vocab"
)

// simUnderPrometheus runs a stand-in vLLM in real time (three simulated minutes
// already behind it, so the scenario has shown) and a real Prometheus scraping
// it every second, and waits until Prometheus has a few scrapes.
func simUnderPrometheus(tb testing.TB, scenario string, legacy bool) (inst string, prom *testenv.Prometheus) {
	tb.Helper()
	insts, prom := SimsUnderPrometheus(tb, vllmsim.Options{Scenario: scenario, Seed: 3, LegacyMetrics: legacy})
	return insts[0], prom
}

// SimsUnderPrometheus runs one stand-in vLLM per options (real time; a zero
// Start is three simulated minutes ago, so the scenario has shown) and a
// real Prometheus scraping all of them every second, and waits until it has
// a few scrapes of each. It returns the instances' host:ports in order.
// Exported for the package's external tests (peers, shipped playbooks).
func SimsUnderPrometheus(tb testing.TB, opts ...vllmsim.Options) (insts []string, prom *testenv.Prometheus) {
	tb.Helper()
	for _, o := range opts {
		if o.Start.IsZero() {
			o.Start = time.Now().Add(-3 * time.Minute)
		}
		sim, err := vllmsim.New(o)
		if err != nil {
			tb.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- sim.Run(ctx) }()
		srv := httptest.NewServer(sim.Handler())
		tb.Cleanup(func() { srv.Close(); cancel(); <-done })
		u, _ := url.Parse(srv.URL)
		insts = append(insts, u.Host)
	}
	prom = testenv.StartPrometheus(tb, testenv.PrometheusOptions{ScrapeTargets: insts})
	for _, inst := range insts {
		prom.WaitUp(tb, inst, 30*time.Second)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		if s := prom.Query(tb, "min(count_over_time(up[1m]))"); len(s) == 1 && s[0].Value >= 5 {
			return insts, prom
		}
		if time.Now().After(deadline) {
			tb.Fatal("prometheus has fewer than 5 scrapes of some target")
		}
	}
}

// snapshotQueries is the tier-1 PromQL picture the shipped playbooks take, for
// one instance, over both metric generations.
func snapshotQueries(inst string) []promkit.PromQuery {
	sel := fmt.Sprintf(`{instance=%q}`, inst)
	mean := func(h string) string {
		return fmt.Sprintf("sum(rate(%s_sum%s[5m])) / sum(rate(%s_count%s[5m]))", h, sel, h, sel)
	}
	q := func(name, sig, expr string) promkit.PromQuery {
		return promkit.PromQuery{Name: name, Signal: sig, Query: expr}
	}
	return []promkit.PromQuery{
		q("queue", vocab.SigQueueDepth, "sum(vllm:num_requests_waiting"+sel+")"),
		q("running", vocab.SigRunning, "sum(vllm:num_requests_running"+sel+")"),
		q("kv", vocab.SigKVUsage, fmt.Sprintf("max(max_over_time(vllm:kv_cache_usage_perc%s[2m]) or max_over_time(vllm:gpu_cache_usage_perc%s[2m]))", sel, sel)),
		q("preemptions", vocab.SigPreemptionsRate, "sum(rate(vllm:num_preemptions_total"+sel+"[5m]))"),
		q("ttft_p99", vocab.SigTTFTP99, "histogram_quantile(0.99, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket"+sel+"[5m])))"),
		q("itl_p99", vocab.SigITLP99, fmt.Sprintf("histogram_quantile(0.99, sum by (le) (rate(vllm:inter_token_latency_seconds_bucket%s[5m]) or rate(vllm:time_per_output_token_seconds_bucket%s[5m])))", sel, sel)),
		q("queue_time", vocab.SigQueueTimeMean, mean("vllm:request_queue_time_seconds")),
		q("prefill_time", vocab.SigPrefillMean, mean("vllm:request_prefill_time_seconds")),
		q("prompt_tokens", vocab.SigPromptTokens, mean("vllm:request_prompt_tokens")),
		q("abort_ratio", vocab.SigAbortRatio, fmt.Sprintf(`sum(rate(vllm:request_success_total{instance=%q,finished_reason="abort"}[5m])) / sum(rate(vllm:request_success_total%s[5m]))`, inst, sel)),
		{Name: "queue_history", Query: "sum(vllm:num_requests_waiting" + sel + ")", Range: true},
	}
}

func TestPrometheusStepAgainstRealPrometheus(t *testing.T) {
	t.Parallel() // waits on real time and a Prometheus of its own
	for _, legacy := range []bool{false, true} {
		t.Run(fmt.Sprintf("overload legacy=%v", legacy), func(t *testing.T) {
			inst, prom := simUnderPrometheus(t, vllmsim.ScenarioOverload, legacy)
			qs := append(snapshotQueries(inst), promkit.PromQuery{Name: "cut_short", Query: "up", Timeout: time.Nanosecond})
			step, err := prometheus.New(prometheus.Config{Queries: qs})
			if err != nil {
				t.Fatal(err)
			}
			in := promInput(t, prom.URL)
			in.Window = vocab.Window{Start: time.Now().Add(-time.Minute), End: time.Now()}
			res, err := step.Run(context.Background(), in)
			if err != nil {
				t.Fatal(err)
			}
			if f := res.Findings["failed"].(map[string]string); len(f) != 1 || !strings.HasPrefix(f["cut_short"], "timeout: query cut_short: no answer within 1ns") {
				t.Fatalf("failed = %v", f)
			}
			for _, s := range []string{vocab.SigQueueDepth, vocab.SigRunning, vocab.SigKVUsage, vocab.SigTTFTP99, vocab.SigITLP99, vocab.SigPrefillMean, vocab.SigPromptTokens} {
				if _, ok := res.Signals[s]; !ok {
					t.Errorf("signal %s missing (both generations must be read): %v", s, res.Signals)
				}
			}
			if h := res.Findings["queue_history"].([]promkit.SeriesSummary); len(h) != 1 || h[0].Points < 5 {
				t.Fatalf("queue history %+v", h)
			}
			v := triage.Diagnose(res.Signals, triage.DefaultThresholds)
			if v.ID != vocab.VerdictOverload {
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
	env := &vocab.Env{Store: store, Targets: target.Client(), Now: sim.Now,
		Prometheus: &vocab.Endpoint{URL: down.URL, Timeout: time.Second}}
	alert := template.Alert{Labels: template.KV{"alertname": "VLLMKVCachePressure", "instance": u.Host}}
	in := func(id string) *vocab.Input {
		return &vocab.Input{RunID: "r", StepID: id, Alert: alert, Env: env, Window: vocab.Window{Start: sim.Now().Add(-time.Hour), End: sim.Now()}}
	}
	prom, _ := prometheus.New(prometheus.Config{Queries: snapshotQueries(u.Host)})
	_, perr := prom.Run(context.Background(), in("snapshot"))
	if vocab.Classify(perr) != vocab.ReasonUnreachable || strings.Contains(perr.Error(), "\n") {
		t.Fatalf("prometheus down: %v (%s)", perr, vocab.Classify(perr))
	}
	scr, _ := scrape.New(scrape.Config{Gap: 10 * time.Second})
	scr.SetSleep(func(_ context.Context, d time.Duration) error { sim.Advance(d); return nil })
	sres, err := scr.Run(context.Background(), in("scrape"))
	if err != nil {
		t.Fatal(err)
	}
	tri, _ := triage.New(triage.Config{})
	out, _ := tri.Run(context.Background(), &vocab.Input{Prior: map[string]*vocab.Result{"scrape": sres}}) // the failed step left no result
	if out.Verdict.ID != vocab.VerdictKVPressure || out.Findings["sources"].([]string)[0] != "scrape" {
		t.Fatalf("verdict %+v from %v", out.Verdict, out.Findings["sources"])
	}
}

// TestPrometheusBaselinesOnRealPrometheus: two stand-in vLLMs under a real
// Prometheus, their traffic scripted with Sim.SetShape, baselines read over
// short windows (the shipped 30m would take half an hour): chat prompts
// growing 5× at a steady rate, and a RAG service's always-long prompts under
// 4× its traffic. The prometheus step's one baseline query per signal gives
// the window before the alert and, Prometheus holding no day-ago data, no
// day-ago signal; triage from the snapshot alone names prefill-bound and
// overload, judging the prompts against the instance's own past.
func TestPrometheusBaselinesOnRealPrometheus(t *testing.T) {
	t.Parallel() // waits on real time and a Prometheus of its own
	type incident struct {
		name          string
		before, after vllmsim.Shape
		want          string
		inst          string
		sim           *vllmsim.Sim
	}
	rag := dist(6000, 5000, 7000)
	cases := []*incident{
		{name: "prompts 5x longer", before: vllmsim.Shape{RPS: new(0.8), PromptTokens: dist(300, 64, 1500)},
			after: vllmsim.Shape{RPS: new(0.8), PromptTokens: dist(1500, 600, 3000)}, want: vocab.VerdictPrefillBound},
		{name: "always-long prompts, then overload", before: vllmsim.Shape{RPS: new(0.4), PromptTokens: rag},
			after: vllmsim.Shape{RPS: new(1.6), PromptTokens: rag}, want: vocab.VerdictOverload},
	}
	var targets []string
	for i, c := range cases {
		sim, err := vllmsim.New(vllmsim.Options{Scenario: vllmsim.ScenarioHealthy, Seed: uint64(3 + i), Start: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		if err := sim.SetShape(c.before); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- sim.Run(ctx) }()
		srv := httptest.NewServer(sim.Handler())
		t.Cleanup(func() { srv.Close(); cancel(); <-done })
		u, _ := url.Parse(srv.URL)
		c.inst, c.sim = u.Host, sim
		targets = append(targets, u.Host)
	}
	prom := testenv.StartPrometheus(t, testenv.PrometheusOptions{ScrapeTargets: targets})
	for _, inst := range targets {
		prom.WaitUp(t, inst, 30*time.Second)
	}
	time.Sleep(40 * time.Second) // the instances' own past
	shiftAt := time.Now()
	for _, c := range cases {
		if err := c.sim.SetShape(c.after); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(25 * time.Second)
	startsAt := shiftAt.Add(5 * time.Second) // the alert fired 5 s into the shift
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sel := fmt.Sprintf(`{instance=%q}`, c.inst)
			rate := func(m string) string { return fmt.Sprintf("sum(rate(%s%s[15s]))", m, sel) }
			q := func(name, sig, expr string, base bool) promkit.PromQuery {
				return promkit.PromQuery{Name: name, Signal: sig, Query: expr, Baseline: base}
			}
			step, err := prometheus.New(prometheus.Config{
				Baseline: prometheus.BaselineConfig{Window: 30 * time.Second, Gap: 8 * time.Second},
				Queries: []promkit.PromQuery{
					q("queue", vocab.SigQueueDepth, "max_over_time(sum(vllm:num_requests_waiting"+sel+")[15s:])", false),
					q("running", vocab.SigRunning, "max(vllm:num_requests_running"+sel+")", false),
					q("kv", vocab.SigKVUsage, "max(vllm:kv_cache_usage_perc"+sel+")", false),
					q("admit_rate", vocab.SigAdmitRate, rate("vllm:time_to_first_token_seconds_count"), false),
					q("ttft_p50", vocab.SigTTFTP50, "histogram_quantile(0.5, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket"+sel+"[15s])))", false),
					q("prefill_time", vocab.SigPrefillMean, rate("vllm:request_prefill_time_seconds_sum")+" / "+rate("vllm:request_prefill_time_seconds_count"), true),
					q("prompt_tokens_now", vocab.SigPromptTokensNow, rate("vllm:prompt_tokens_total")+" / "+rate("vllm:time_to_first_token_seconds_count"), true),
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			in := promInput(t, prom.URL)
			in.Alert = template.Alert{StartsAt: startsAt, Labels: template.KV{"alertname": "VLLMHighTTFT", "instance": c.inst}}
			in.Window = vocab.Window{Start: startsAt.Add(-time.Minute), End: time.Now()}
			res, err := step.Run(context.Background(), in)
			if err != nil {
				t.Fatal(err)
			}
			base, ok := res.Signals[vocab.BaselineOf(vocab.SigPromptTokensNow, false)]
			if _, day := res.Signals[vocab.BaselineOf(vocab.SigPromptTokensNow, true)]; !ok || day {
				t.Fatalf("baselines %v: want the window before and no day-ago one (Prometheus has no day of data)", res.Signals)
			}
			if lo, hi := map[bool]float64{true: 4000, false: 150}[c.want == vocab.VerdictOverload], map[bool]float64{true: 8000, false: 600}[c.want == vocab.VerdictOverload]; base < lo || base > hi {
				t.Errorf("prompt baseline %.0f tokens, want the before traffic's (%.0f..%.0f)", base, lo, hi)
			}
			tri, _ := triage.New(triage.Config{})
			out, _ := tri.Run(context.Background(), &vocab.Input{Env: &vocab.Env{}, Prior: map[string]*vocab.Result{"snapshot": res}})
			v := out.Verdict
			t.Logf("%s: %s basis %v\n%q", c.name, v.ID, v.Basis, v.Evidence)
			if v.ID != c.want || v.Basis[vocab.SigPromptTokensNow] != vocab.BasisBefore {
				t.Fatalf("verdict %s basis %v, want %s judged against the window before\nsignals %v\nevidence %q", v.ID, v.Basis, c.want, res.Signals, v.Evidence)
			}
		})
	}
}

// dist is a prompt-length distribution for a shape.
func dist(mean, lo, hi float64) *vllmsim.DistShape {
	return &vllmsim.DistShape{Mean: new(mean), Min: new(lo), Max: new(hi), Sigma: new(0.3)}
}
