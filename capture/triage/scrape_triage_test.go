package triage

import (
	"context"
	"flag"
	"fmt"
	"math"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/autocapture/autocapture/capture/internal/exposition"
	"github.com/autocapture/autocapture/capture/scrape"
	"github.com/autocapture/autocapture/internal/testkit/fixtures"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vllmsim"
	"github.com/autocapture/autocapture/vocab"
	"github.com/prometheus/alertmanager/template"
)

// The scrape and triage families together: the simulated causes scraped
// twice and named by triage, and real recorded expositions read by the scrape
// step and judged by triage (capture/scrape's own tests are in its package).

// TestScrapeThenTriageFindsEachSimulatedCause is the product's proof: for every
// cause the stand-in vLLM injects, two scrapes over the gap (in simulated time)
// and triage name that cause, on both metric generations.
//
// -seeds N runs seeds 1..N instead of seed 7 alone (the capture README's 280/280 is
// -seeds 20: 20 seeds × 7 causes × 2 generations).
func TestScrapeThenTriageFindsEachSimulatedCause(t *testing.T) {
	t.Parallel()
	seeds := []uint64{7}
	if *scrapeSeeds > 1 {
		seeds = nil
		for s := range uint64(*scrapeSeeds) {
			seeds = append(seeds, s+1)
		}
	}
	for _, seed := range seeds {
		for _, legacy := range []bool{false, true} {
			for _, scenario := range vllmsim.Scenarios() {
				name := fmt.Sprintf("%s/seed%d", scenario, seed)
				if legacy {
					name += "/legacy"
				}
				t.Run(name, func(t *testing.T) {
					sim, err := vllmsim.New(vllmsim.Options{Scenario: scenario, Seed: seed, LegacyMetrics: legacy, Start: time.Unix(1.8e9, 0)})
					if err != nil {
						t.Fatal(err)
					}
					sim.Advance(3 * time.Minute) // past the warm-up: the cause has shown
					srv := httptest.NewServer(sim.Handler())
					defer srv.Close()
					in, _ := scrapeInput(t, srv)
					in.Env.Now = sim.Now
					step, err := scrape.New(scrape.Config{Gap: 10 * time.Second})
					if err != nil {
						t.Fatal(err)
					}
					step.SetSleep(func(_ context.Context, d time.Duration) error { sim.Advance(d); return nil })
					res, err := step.Run(context.Background(), in)
					if err != nil {
						t.Fatalf("scrape: %v", err)
					}
					wantGen := map[bool]string{false: exposition.GenerationCurrent, true: exposition.GenerationLegacy}[legacy]
					gap, _ := res.Findings["gap_s"].(float64)
					if res.Findings["generation"] != wantGen || gap < 1 || gap > 10 || len(res.Artifacts) != 2 {
						t.Fatalf("findings %v, %d artifacts", res.Findings, len(res.Artifacts))
					}
					tri, _ := New(Config{})
					out, err := tri.Run(context.Background(), &vocab.Input{Prior: map[string]*vocab.Result{"scrape": res}})
					if err != nil {
						t.Fatal(err)
					}
					if out.Verdict.ID != scenario {
						t.Fatalf("verdict %s %v, want %s\nsignals %v\nevidence %q", out.Verdict.ID, out.Verdict.Contributing,
							scenario, res.Signals, out.Verdict.Evidence)
					}
					checkEvidenceAgainstSignals(t, out.Signals, DefaultThresholds, out.Verdict)
				})
			}
		}
	}
}

// scrapeSeeds widens TestScrapeThenTriageFindsEachSimulatedCause (and the
// onset test) to seeds 1..N.
var scrapeSeeds = flag.Int("seeds", 1, "run the simulated-cause triage tests over seeds 1..N (default: seed 7)")

// TestRecordedScrapes reads real vLLM expositions through the scrape step's
// parsing and triage, asserting what an operator reading them would conclude.
func TestRecordedScrapes(t *testing.T) {
	cases := []struct {
		file   string
		labels map[string]string
		gen    string
		want   string
		check  func(t *testing.T, s vocab.Signals)
	}{
		{"v1-2026-09-inferstack-qwen2.5-1.5b.prom", nil, exposition.GenerationCurrent, vocab.VerdictHealthy, func(t *testing.T, s vocab.Signals) {
			// An idle server: 10 requests in its life, nothing queued or running;
			// its one slow first token (a warm-up) is too few to call a p99.
			if _, ok := s[vocab.SigTTFTP99]; ok {
				t.Error("a p99 from 10 observations")
			}
			near(t, s, vocab.SigPrefixHitRatio, 432.0/530)
			near(t, s, vocab.SigQueueDepth, 0)
		}},
		{"v1-2026-08-blackbox-rca-cpu.prom", nil, exposition.GenerationCurrent, vocab.VerdictUnexplained, func(t *testing.T, s vocab.Signals) {
			// Qwen3-0.6B on a CPU image: ~0.1 s per token with nothing queued, an
			// empty batch and 6-token prompts: slow for no load reason.
			near(t, s, vocab.SigITLP99, 0.455)
			near(t, s, vocab.SigRunning, 0)
		}},
		{"v0.5.x-2024-08-kubeai.prom", map[string]string{"model_name": "neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8"}, exposition.GenerationLegacy, vocab.VerdictHealthy, func(t *testing.T, s vocab.Signals) {
			near(t, s, vocab.SigKVUsage, 0.0026235242675994863) // gpu_cache_usage_perc
			near(t, s, vocab.SigQueueDepth, 2)                  // the injected other/OTHER series filtered out
			near(t, s, vocab.SigITLP50, 0.0376)                 // time_per_output_token_seconds
		}},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			body := readFixture(t, c.file)
			step, _ := scrape.New(scrape.Config{Labels: c.labels})
			res := &vocab.Result{Findings: map[string]any{"target": "fixture"}}
			t0 := time.Unix(1.8e9, 0)
			if err := step.Analyse(res, nil, step.SampleOf(body, t0)); err != nil {
				t.Fatal(err)
			}
			if res.Findings["generation"] != c.gen {
				t.Fatalf("generation %v, want %s", res.Findings["generation"], c.gen)
			}
			// One scrape: triage gets gauges only; the fixture's lifetime figures
			// (all a recorded file holds) are kept, labelled, and read here.
			for _, sig := range []string{vocab.SigTTFTP99, vocab.SigITLP99, vocab.SigITLP50, vocab.SigAbortRatio, vocab.SigPrefillMean} {
				if _, ok := res.Signals[sig]; ok {
					t.Errorf("one scrape gave triage the lifetime %s", sig)
				}
			}
			life, ok := res.Findings["lifetime_signals"].(vocab.Signals)
			if !ok {
				t.Fatalf("no lifetime signals in findings: %v", res.Findings)
			}
			c.check(t, life)
			if v := Diagnose(life, DefaultThresholds); v.ID != c.want {
				t.Fatalf("verdict %s, want %s: %q", v.ID, c.want, v.Evidence)
			}
			// The same file twice: a gap in which nothing happened.
			twice := &vocab.Result{Findings: map[string]any{"target": "fixture"}}
			if err := step.Analyse(twice, step.SampleOf(body, t0), step.SampleOf(body, t0.Add(5*time.Second))); err != nil {
				t.Fatal(err)
			}
			if _, ok := twice.Signals[vocab.SigITLP50]; ok || twice.Signals[vocab.SigRequestRate] != 0 {
				t.Fatalf("an idle gap gave latency or traffic: %v", twice.Signals)
			}
		})
	}
}

func near(t *testing.T, s vocab.Signals, name string, want float64) {
	t.Helper()
	got, ok := s[name]
	if !ok || math.Abs(got-want) > 0.001*math.Max(1, math.Abs(want)) {
		t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
	}
}

// scrapeInput is an Input for a scrape of srv, storing into a temporary folder.
func scrapeInput(t *testing.T, srv *httptest.Server) (*vocab.Input, *storage.Local) {
	t.Helper()
	store, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(srv.URL)
	return &vocab.Input{
		RunID: "run1", StepID: "scrape",
		Alert: template.Alert{Labels: template.KV{"alertname": "VLLMHighTTFT", "instance": u.Host}},
		Env:   &vocab.Env{Targets: srv.Client(), Store: store},
	}, store
}

// readFixture is a real vLLM /metrics scrape recorded by another project
// (vllm-metrics/ under $AUTOCAPTURE_FIXTURES, each with its origin in the
// .source.txt beside it; internal/testkit/fixtures skips the test where it is unset).
func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	return fixtures.Read(t, filepath.Join("vllm-metrics", name))
}
