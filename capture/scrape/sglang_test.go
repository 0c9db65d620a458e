package scrape

import (
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/capture/internal/sglangexpo"
	"github.com/autocapture/autocapture/internal/testkit/fixtures"
	"github.com/autocapture/autocapture/vocab"
)

// readSGLangFixture is a real SGLang /metrics scrape, pasted by SGLang's
// developers into their docs (sglang-metrics/ under $AUTOCAPTURE_FIXTURES,
// origins in its SOURCES.md).
func readSGLangFixture(t *testing.T, name string) []byte {
	t.Helper()
	return fixtures.Read(t, filepath.Join("sglang-metrics", name))
}

// again is a second scrape of the same server after it served the same
// traffic once more: every counter and histogram sample doubled, gauges
// unchanged. Over the gap, the pair reads exactly the file's lifetime
// figures, which the tests compute by hand.
func again(t *testing.T, body []byte) []byte {
	t.Helper()
	var out strings.Builder
	for _, line := range strings.SplitAfter(string(body), "\n") {
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		cumulative := strings.HasSuffix(name, "_total") || strings.HasSuffix(name, "_bucket") ||
			strings.HasSuffix(name, "_count") || strings.HasSuffix(name, "_sum")
		if strings.HasPrefix(line, "#") || !cumulative {
			out.WriteString(line)
			continue
		}
		i := strings.LastIndexByte(strings.TrimRight(line, "\n"), ' ')
		v, err := strconv.ParseFloat(strings.TrimSpace(line[i+1:]), 64)
		if err != nil {
			t.Fatalf("sample %q: %v", line, err)
		}
		out.WriteString(line[:i+1] + strconv.FormatFloat(2*v, 'g', -1, 64) + "\n")
	}
	return []byte(out.String())
}

// analyseTwice runs the scrape's analysis over body and again(body), gap apart.
func analyseTwice(t *testing.T, body []byte, gap time.Duration) *vocab.Result {
	t.Helper()
	step, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	res := &vocab.Result{Findings: map[string]any{"target": "fixture"}}
	t0 := time.Unix(1.8e9, 0)
	if err := step.Analyse(res, step.SampleOf(body, t0), step.SampleOf(again(t, body), t0.Add(gap))); err != nil {
		t.Fatal(err)
	}
	return res
}

func wantSignals(t *testing.T, got vocab.Signals, want vocab.Signals) {
	t.Helper()
	for k, v := range want {
		g, ok := got[k]
		if !ok || math.Abs(g-v) > 1e-6*math.Max(1, math.Abs(v)) {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
}

func wantNotExposed(t *testing.T, res *vocab.Result, why string, sigs ...string) {
	t.Helper()
	gaps, _ := res.Findings[vocab.FindingNotExposed].(map[string]string)
	for _, s := range sigs {
		if _, ok := res.Signals[s]; ok {
			t.Errorf("%s = %v: this era has no series for it", s, res.Signals[s])
		}
		if gaps[s] != why {
			t.Errorf("not_exposed[%s] = %q, want %q", s, gaps[s], why)
		}
	}
}

// TestSGLangRecordedScrapes reads SGLang's three real scrapes as two scrapes
// of a gap (the file, then the file with its counters doubled), and checks
// the engine, the era, every signal against the file's numbers worked by
// hand, and what each era does not expose.
func TestSGLangRecordedScrapes(t *testing.T) {
	const gap = 10 * time.Second
	gapS := gap.Seconds()
	t.Run("v0.3.5 gemma, name label", func(t *testing.T) {
		res := analyseTwice(t, readSGLangFixture(t, "v0.3.5-2024-11-docs-gemma2-9b-name-label.prom"), gap)
		if res.Findings[vocab.FindingEngine] != vocab.EngineSGLang || res.Findings[vocab.FindingEra] != sglangexpo.EraV035 {
			t.Fatalf("engine %v era %v, want sglang v0.3.5", res.Findings[vocab.FindingEngine], res.Findings[vocab.FindingEra])
		}
		wantSignals(t, res.Signals, vocab.Signals{
			vocab.SigQueueDepth: 0, vocab.SigRunning: 0, // num_requests_waiting/_running
			vocab.SigKVUsage: 0.01,
			// TTFT buckets 0.1:707 0.25:1187 0.5:1350 0.75:2124 of 2124.
			vocab.SigTTFTP50: 0.1 + 0.15*(1062-707)/(1187-707.0),
			vocab.SigTTFTP99: 0.5 + 0.25*(0.99*2124-1350)/(2124-1350.0),
			// TPOT buckets 0.075:139394 0.1:422029 of 422425.
			vocab.SigITLP50:        0.075 + 0.025*(0.5*422425-139394)/(422029-139394.0),
			vocab.SigITLP99:        0.075 + 0.025*(0.99*422425-139394)/(422029-139394.0),
			vocab.SigQueueTimeMean: 24885.007263183594 / 2104, // waiting_request_latency_seconds
			vocab.SigQueueTimeN:    2104,
			vocab.SigE2EMean:       70517.99934530258 / 2104,
			vocab.SigPromptTokens:  500552.0 / 2104, // request_prompt_tokens
			vocab.SigOutputTokens:  424529.0 / 2104,
			vocab.SigRequestRate:   2104 / gapS, // e2e count: no num_requests_total
			vocab.SigAdmitRate:     2124 / gapS,
			vocab.SigQueueGrowth:   0,
		})
		wantNotExposed(t, res, "not exposed by SGLang v0.3.5", vocab.SigPreemptionsRate, vocab.SigPrefillMean,
			vocab.SigDecodeMean, vocab.SigPromptTokensNow, vocab.SigAbortRatio, vocab.SigPrefixHitRatio)
		x, _ := res.Findings[vocab.FindingEngineExtras].(map[string]float64)
		if math.Abs(x["cache_hit_rate_last_batch"]-0.1061) > 1e-9 {
			t.Errorf("cache_hit_rate gauge 10.61 %% read as %v, want the ratio 0.1061 (in the extras, never the prefix signal)", x["cache_hit_rate_last_batch"])
		}
	})
	t.Run("v0.3.6-v0.4 llama, overloaded", func(t *testing.T) {
		res := analyseTwice(t, readSGLangFixture(t, "v0.3.6-0.4-docs-llama3.1-8b-overloaded.prom"), gap)
		if res.Findings[vocab.FindingEngine] != vocab.EngineSGLang || res.Findings[vocab.FindingEra] != sglangexpo.EraV036 {
			t.Fatalf("engine %v era %v, want sglang v0.3.6-v0.4", res.Findings[vocab.FindingEngine], res.Findings[vocab.FindingEra])
		}
		wantSignals(t, res.Signals, vocab.Signals{
			vocab.SigQueueDepth: 2826, vocab.SigRunning: 162, vocab.SigKVUsage: 0.28,
			// 8495 of 11008 first tokens beyond the top bucket (30 s): both
			// quantiles answer it, as histogram_quantile does.
			vocab.SigTTFTP50: 30, vocab.SigTTFTP99: 30,
			// TPOT buckets 0.075:433413 0.1:4950195; 0.5:7312226 0.75:7339675 of 7400757.
			vocab.SigITLP50:       0.075 + 0.025*(0.5*7400757-433413)/(4950195-433413.0),
			vocab.SigITLP99:       0.5 + 0.25*(0.99*7400757-7312226)/(7339675-7312226.0),
			vocab.SigE2EMean:      3.116093850019932e+06 / 11228,
			vocab.SigPromptTokens: 8.128902e+06 / 11228, // counted at the finish: per finished request
			vocab.SigOutputTokens: 7.557572e+06 / 11228,
			vocab.SigRequestRate:  11228 / gapS,
			vocab.SigAdmitRate:    11008 / gapS,
		})
		wantNotExposed(t, res, "not exposed by SGLang v0.3.6–v0.4", vocab.SigPreemptionsRate, vocab.SigQueueTimeMean,
			vocab.SigPrefillMean, vocab.SigDecodeMean, vocab.SigPromptTokensNow, vocab.SigAbortRatio, vocab.SigPrefixHitRatio)
		x, _ := res.Findings[vocab.FindingEngineExtras].(map[string]float64)
		if x["cache_hit_rate_last_batch"] != 0.007507552643049313 || x["num_used_tokens"] != 123859 {
			t.Errorf("extras %v", x)
		}
		if !strings.Contains(res.Summary, "SGLang v0.3.6–v0.4") {
			t.Errorf("summary %q does not name the dialect", res.Summary)
		}
		metrics, _ := res.Findings["metrics"].(map[string]any)
		if _, ok := metrics["sglang:num_queue_reqs"]; !ok {
			t.Errorf("findings' metrics default to the engine's own families: %v", metrics)
		}
	})
	t.Run("v0.3.6-v0.4 llama, one non-streamed request", func(t *testing.T) {
		res := analyseTwice(t, readSGLangFixture(t, "v0.3.6-0.4-docs-llama3.1-8b-one-request.prom"), gap)
		if res.Findings[vocab.FindingEra] != sglangexpo.EraV036 {
			t.Fatalf("era %v", res.Findings[vocab.FindingEra])
		}
		// One observation in (0.25, 0.5]: a p50 interpolated at half the
		// bucket, no p99 from one request.
		wantSignals(t, res.Signals, vocab.Signals{vocab.SigTTFTP50: 0.375, vocab.SigE2EMean: 0.30521273612976074,
			vocab.SigPromptTokens: 7, vocab.SigOutputTokens: 8, vocab.SigRequestRate: 1 / gapS})
		if _, ok := res.Signals[vocab.SigTTFTP99]; ok {
			t.Error("a p99 from one request")
		}
		notes, _ := res.Findings[vocab.FindingEngineNotes].([]string)
		if !strings.Contains(strings.Join(notes, "\n"), "non-streamed") {
			t.Errorf("notes %q do not say TTFT counts non-streamed requests (0.3046 s against an e2e of 0.3052 s here)", notes)
		}
	})
}

// TestSGLangOneScrapeGivesGaugesOnly: one scrape of SGLang, like one of vLLM,
// gives triage its gauges only, and the era's gaps are still said.
func TestSGLangOneScrapeGivesGaugesOnly(t *testing.T) {
	step, _ := New(Config{})
	res := &vocab.Result{Findings: map[string]any{"target": "fixture"}}
	body := readSGLangFixture(t, "v0.3.6-0.4-docs-llama3.1-8b-overloaded.prom")
	if err := step.Analyse(res, nil, step.SampleOf(body, time.Unix(1.8e9, 0))); err != nil {
		t.Fatal(err)
	}
	if len(res.Signals) != 3 || res.Signals[vocab.SigQueueDepth] != 2826 {
		t.Fatalf("signals %v, want queue, running and KV only", res.Signals)
	}
	wantNotExposed(t, res, "not exposed by SGLang v0.3.6–v0.4", vocab.SigAbortRatio)
}

// sglang2026 is a 2026-era SGLang exposition written by us, not recorded
// (no whole scrape of that era could be found: fixtures' SOURCES.md), from
// the families and labels SGLANG.md §3 lists: two DP ranks of two TP ranks,
// every scheduler exporting (--enable-metrics-for-all-schedulers), priority
// scheduling on. v holds the counters' and histograms' values (0 before).
func sglang2026(queue0, queue1 float64, v float64) string {
	sched := func(tp, dp, prio string) string {
		return `model_name="m",engine_type="unified",tp_rank="` + tp + `",pp_rank="0",moe_ep_rank="0",dp_rank="` + dp + `",priority="` + prio + `"`
	}
	f := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	var b strings.Builder
	w := func(s ...string) {
		for _, l := range s {
			b.WriteString(l + "\n")
		}
	}
	w("# TYPE sglang:num_queue_reqs gauge",
		"sglang:num_queue_reqs{"+sched("0", "0", "")+"} "+f(queue0),
		"sglang:num_queue_reqs{"+sched("1", "0", "")+"} "+f(queue0), // the same queue, seen by TP rank 1
		"sglang:num_queue_reqs{"+sched("0", "0", "1")+"} 5",         // priority 1's share of it
		"sglang:num_queue_reqs{"+sched("0", "1", "")+"} "+f(queue1),
		"sglang:num_queue_reqs{"+sched("1", "1", "")+"} "+f(queue1),
		"# TYPE sglang:num_running_reqs gauge",
		"sglang:num_running_reqs{"+sched("0", "0", "")+"} 30",
		"sglang:num_running_reqs{"+sched("1", "0", "")+"} 30",
		"sglang:num_running_reqs{"+sched("0", "1", "")+"} 34",
		"# TYPE sglang:token_usage gauge",
		"sglang:token_usage{"+sched("0", "0", "")+"} 0.97",
		"sglang:token_usage{"+sched("1", "0", "")+"} 0.96",
		"sglang:token_usage{"+sched("0", "1", "")+"} 0.5",
		"# TYPE sglang:full_token_usage gauge",
		"sglang:full_token_usage{"+sched("0", "0", "")+"} 0.97",
		"# TYPE sglang:cache_hit_rate gauge",
		"sglang:cache_hit_rate{"+sched("0", "0", "")+"} 0", // a decode log point wrote 0 (§4)
		"# TYPE sglang:spec_accept_rate gauge",
		"sglang:spec_accept_rate{"+sched("0", "0", "")+"} 0.7",
		"# TYPE sglang:num_prefill_bootstrap_queue_reqs gauge",
		"sglang:num_prefill_bootstrap_queue_reqs{"+sched("0", "0", "")+"} 3",
		"# TYPE sglang:num_retracted_requests_total counter",
		"sglang:num_retracted_requests_total{"+sched("0", "0", "")+"} "+f(100+30*v),
		"sglang:num_retracted_requests_total{"+sched("0", "1", "")+"} "+f(10*v),
		"# TYPE sglang:num_retracted_input_tokens_total counter",
		"sglang:num_retracted_input_tokens_total{"+sched("0", "0", "")+"} "+f(1000+4000*v),
		"# TYPE sglang:realtime_tokens_total counter",
		`sglang:realtime_tokens_total{mode="prefill_compute",`+sched("0", "0", "")+"} "+f(10000+30000*v),
		`sglang:realtime_tokens_total{mode="prefill_cache",`+sched("0", "0", "")+"} "+f(10000*v),
		`sglang:realtime_tokens_total{mode="decode",`+sched("0", "0", "")+"} "+f(5000+4000*v),
		"# TYPE sglang:num_requests_total counter",
		`sglang:num_requests_total{model_name="m",engine_type="unified",is_streaming="true"} `+f(40*v),
		`sglang:num_requests_total{model_name="m",engine_type="unified",is_streaming="false"} `+f(10*v),
		"# TYPE sglang:num_aborted_requests_total counter",
		`sglang:num_aborted_requests_total{model_name="m",engine_type="unified"} `+f(5*v),
		"# TYPE sglang:cached_tokens_total counter",
		`sglang:cached_tokens_total{model_name="m",engine_type="unified",cache_source="total"} `+f(99*v))
	hist := func(name, labels string, les []string, cum []float64, sum float64) {
		w("# TYPE " + name + " histogram")
		for i, le := range les {
			w(name + "_bucket{" + labels + `,le="` + le + `"} ` + f(cum[i]*v))
		}
		w(name+"_count{"+labels+"} "+f(cum[len(cum)-1]*v), name+"_sum{"+labels+"} "+f(sum*v))
	}
	tok := `model_name="m",engine_type="unified",`
	le := []string{"0.1", "1", "10", "+Inf"}
	hist("sglang:time_to_first_token_seconds", tok+`is_streaming="true"`, le, []float64{10, 20, 40, 40}, 100)
	nonStreamed := `sglang:time_to_first_token_seconds_%s{` + tok + `is_streaming="false"%s} `
	w(fmt.Sprintf(nonStreamed, "bucket", `,le="0.1"`)+"0", fmt.Sprintf(nonStreamed, "bucket", `,le="1"`)+"0",
		fmt.Sprintf(nonStreamed, "bucket", `,le="10"`)+f(10*v), fmt.Sprintf(nonStreamed, "bucket", `,le="+Inf"`)+f(10*v),
		fmt.Sprintf(nonStreamed, "count", "")+f(10*v), fmt.Sprintf(nonStreamed, "sum", "")+f(50*v))
	hist("sglang:inter_token_latency_seconds", `model_name="m",engine_type="unified"`, []string{"0.01", "0.1", "+Inf"}, []float64{100, 1000, 1000}, 50)
	hist("sglang:e2e_request_latency_seconds", tok+`is_streaming="true"`, le, []float64{0, 0, 40, 40}, 400)
	hist("sglang:queue_time_seconds", sched("0", "0", ""), le, []float64{0, 10, 50, 50}, 100)
	hist("sglang:per_stage_req_latency_seconds", `stage="prefill_forward",`+sched("0", "0", ""), le, []float64{0, 50, 50, 50}, 25)
	w(`sglang:per_stage_req_latency_seconds_bucket{stage="decode_waiting",` + sched("0", "0", "") + `,le="+Inf"} ` + f(50*v))
	w(`sglang:per_stage_req_latency_seconds_count{stage="decode_waiting",`+sched("0", "0", "")+`} `+f(50*v),
		`sglang:per_stage_req_latency_seconds_sum{stage="decode_waiting",`+sched("0", "0", "")+`} `+f(500*v))
	hist("sglang:prompt_tokens_histogram", `model_name="m",engine_type="unified"`, []string{"100", "1000", "+Inf"}, []float64{0, 50, 50}, 40000)
	hist("sglang:generation_tokens_histogram", `model_name="m",engine_type="unified"`, []string{"100", "1000", "+Inf"}, []float64{50, 50, 50}, 4000)
	return b.String()
}

// TestSGLang2026Signals reads the families only 2026 builds have, on our own
// exposition (sglang2026): ranks aggregated per SGLANG.md §1, the priority
// total, streamed TTFT, retractions, per-pass prefix hits and prefill stage.
func TestSGLang2026Signals(t *testing.T) {
	step, _ := New(Config{})
	res := &vocab.Result{Findings: map[string]any{"target": "ours"}}
	t0 := time.Unix(1.8e9, 0)
	first, second := sglang2026(12, 8, 0), sglang2026(4, 8, 1)
	if err := step.Analyse(res, step.SampleOf([]byte(first), t0), step.SampleOf([]byte(second), t0.Add(10*time.Second))); err != nil {
		t.Fatal(err)
	}
	if res.Findings[vocab.FindingEra] != sglangexpo.Era2026 {
		t.Fatalf("era %v, want 2026", res.Findings[vocab.FindingEra])
	}
	wantSignals(t, res.Signals, vocab.Signals{
		vocab.SigQueueDepth:      20,   // (12 on DP 0, seen by both its TP ranks) + 8 on DP 1; priority 1's 5 is part of it
		vocab.SigQueueGrowth:     -0.8, // 20 → 12 in 10 s
		vocab.SigRunning:         64,   // 30 + 34
		vocab.SigKVUsage:         0.97, // the fullest rank
		vocab.SigPreemptionsRate: 4,    // 30 + 10 retractions in 10 s
		vocab.SigTTFTP50:         1,    // streamed only: 40 observations, rank 20 at the top of (0.1, 1]
		vocab.SigTTFTP99:         1 + 9*(39.6-20)/20,
		vocab.SigITLP50:          0.01 + 0.09*400/900,
		vocab.SigITLP99:          0.01 + 0.09*890/900,
		vocab.SigE2EMean:         10,  // streamed: 400 s over 40
		vocab.SigQueueTimeMean:   2,   // queue_time_seconds: 100 s over 50
		vocab.SigQueueTimeN:      50,  //
		vocab.SigPrefillMean:     0.5, // stage="prefill_forward" only
		vocab.SigPromptTokens:    800, // prompt_tokens_histogram
		vocab.SigOutputTokens:    80,
		vocab.SigPromptTokensNow: 800,  // 40000 prefill tokens (computed + cached) per 50 first tokens
		vocab.SigAdmitRate:       5,    // every first token, streamed or not
		vocab.SigAbortRatio:      0.1,  // 5 aborted of 50 finished
		vocab.SigRequestRate:     5,    // num_requests_total
		vocab.SigPrefixHitRatio:  0.25, // realtime_tokens_total: 10000 cached of 40000 prefilled, not the gauge's 0
	})
	wantNotExposed(t, res, "not exposed by SGLang 2026", vocab.SigDecodeMean)
	if gaps := res.Findings[vocab.FindingNotExposed].(map[string]string); len(gaps) != 1 {
		t.Errorf("not exposed %v: 2026 lacks only the decode time", gaps)
	}
	x, _ := res.Findings[vocab.FindingEngineExtras].(map[string]float64)
	if x["spec_accept_rate"] != 0.7 || x["pd_prefill_bootstrap_queue"] != 3 || x["retracted_input_tokens_per_s"] != 400 ||
		x["stage_decode_waiting_mean_s"] != 10 { // 500 s over 50 requests; prefill_forward is the signal, not an extra
		t.Errorf("extras %v", x)
	}
	if _, dup := x["stage_prefill_forward_mean_s"]; dup {
		t.Errorf("the prefill stage is prefill_time_mean, not an extra too: %v", x)
	}
}

// TestSGLangEraMarkers tells each era from its marker alone (SGLANG.md §2),
// and says what an era's builds may or may not have.
func TestSGLangEraMarkers(t *testing.T) {
	cases := []struct{ name, body, era string }{
		{"v0.3.5: name label, num_requests_waiting", "# TYPE sglang:num_requests_waiting gauge\nsglang:num_requests_waiting{name=\"m\"} 1\n", sglangexpo.EraV035},
		{"v0.3.6: model_name, time_per_output_token", "# TYPE sglang:time_per_output_token_seconds histogram\nsglang:time_per_output_token_seconds_count{model_name=\"m\"} 1\nsglang:time_per_output_token_seconds_sum{model_name=\"m\"} 1\n", sglangexpo.EraV036},
		{"v0.3.6: a fresh server's gauges", "# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{model_name=\"m\"} 0\n", sglangexpo.EraV036},
		{"2025: engine_type", "# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{model_name=\"m\",engine_type=\"unified\"} 0\n", sglangexpo.Era2025},
		{"late 2025: queue_time_seconds histogram", "# TYPE sglang:queue_time_seconds histogram\nsglang:queue_time_seconds_count{model_name=\"m\"} 1\nsglang:queue_time_seconds_sum{model_name=\"m\"} 1\n", sglangexpo.EraLate2025},
		{"late 2025: num_retracted_requests_total", "# TYPE sglang:num_retracted_requests_total counter\nsglang:num_retracted_requests_total{model_name=\"m\"} 1\n", sglangexpo.EraLate2025},
		{"2026: priority label", "# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{model_name=\"m\",priority=\"\"} 0\n", sglangexpo.Era2026},
		{"2026: kv_used_tokens", "# TYPE sglang:kv_used_tokens gauge\nsglang:kv_used_tokens{model_name=\"m\"} 0\n", sglangexpo.Era2026},
		{"unknown", "# TYPE sglang:weight_memory_usage_gb gauge\nsglang:weight_memory_usage_gb 3\n", sglangexpo.EraUnknown},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := mustParse(t, c.body, nil)
			if got := sglangexpo.EraOf(e.Fams); got != c.era {
				t.Fatalf("era %s, want %s", got, c.era)
			}
			if EngineOf(e) != vocab.EngineSGLang {
				t.Fatal("not told SGLang")
			}
		})
	}
	if EngineOf(mustParse(t, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 0\n", nil)) != vocab.EngineVLLM {
		t.Fatal("vLLM told SGLang")
	}
}

// TestSGLangAbortsByEra: from late 2025 the abort counter exists in every
// build and writes its series at the first abort, so finished requests
// without it are a ratio of 0; a 2025 build without it may simply predate
// it, and says so rather than guess.
func TestSGLangAbortsByEra(t *testing.T) {
	const late = "# TYPE sglang:num_retracted_requests_total counter\nsglang:num_retracted_requests_total{model_name=\"m\"} 0\n"
	const early = "# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{model_name=\"m\",engine_type=\"unified\"} 0\n"
	finished := func(n int) string {
		return "# TYPE sglang:num_requests_total counter\nsglang:num_requests_total{model_name=\"m\"} " + strconv.Itoa(n) + "\n"
	}
	step, _ := New(Config{})
	t0 := time.Unix(1.8e9, 0)
	for _, c := range []struct {
		name, marker string
		ratio        bool
		why          string
	}{
		{"late 2025", late, true, ""},
		{"2025", early, false, "not exposed by this SGLang 2025 build"},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := &vocab.Result{Findings: map[string]any{"target": "ours"}}
			if err := step.Analyse(res, step.SampleOf([]byte(c.marker+finished(10)), t0), step.SampleOf([]byte(c.marker+finished(30)), t0.Add(time.Second))); err != nil {
				t.Fatal(err)
			}
			v, ok := res.Signals[vocab.SigAbortRatio]
			gaps, _ := res.Findings[vocab.FindingNotExposed].(map[string]string)
			if ok != c.ratio || (ok && v != 0) || gaps[vocab.SigAbortRatio] != c.why {
				t.Fatalf("abort ratio %v (present %v), not exposed %q; want present %v, %q", v, ok, gaps[vocab.SigAbortRatio], c.ratio, c.why)
			}
		})
	}
}
