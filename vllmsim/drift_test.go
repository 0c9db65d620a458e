package vllmsim

import (
	"math"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/autocapture/autocapture/internal/testkit/fixtures"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The drift test holds the sim's /metrics to recorded scrapes of real vLLM
// servers (vllm-metrics/ under $AUTOCAPTURE_FIXTURES, see its README): every vllm:
// family's name, type, label names and bucket boundaries. Python's _created
// gauges and the non-vllm families (process_, python_, http_) are out of
// scope.

// family is the shape of one metric family.
type family struct {
	typ     dto.MetricType
	labels  []string // sorted, le excluded
	buckets []float64
}

func parseFamilies(t *testing.T, text string) map[string]family {
	t.Helper()
	out := map[string]family{}
	for name, mf := range parseExposition(t, text) {
		if !strings.HasPrefix(name, "vllm:") || strings.HasSuffix(name, "_created") {
			continue
		}
		out[name] = shapeOf(mf)
	}
	return out
}

// parseExposition parses a text exposition into its families.
func parseExposition(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parse exposition: %v", err)
	}
	return mfs
}

// shapeOf is a family's type, label names (sorted, le excluded as the
// histogram's buckets) and bucket boundaries.
func shapeOf(mf *dto.MetricFamily) family {
	f := family{typ: mf.GetType()}
	for _, m := range mf.Metric {
		for _, lp := range m.Label {
			if !slices.Contains(f.labels, lp.GetName()) {
				f.labels = append(f.labels, lp.GetName())
			}
		}
		if h := m.GetHistogram(); h != nil && f.buckets == nil {
			for _, b := range h.Bucket {
				f.buckets = append(f.buckets, b.GetUpperBound())
			}
		}
	}
	slices.Sort(f.labels)
	return f
}

func readFixture(t *testing.T, name string) map[string]family {
	t.Helper()
	return parseFamilies(t, string(fixtures.Read(t, filepath.Join("vllm-metrics", name))))
}

// scrapeSim returns the families a sim built with opts exposes, read
// through its HTTP handler like a scraper would.
func scrapeSim(t *testing.T, opts Options) map[string]family {
	t.Helper()
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("GET /metrics: %d", rec.Code)
	}
	return parseFamilies(t, rec.Body.String())
}

// TestMetricsMatchCurrentVLLM compares the default (2026) generation with
// both recorded V1 scrapes, family by family, both ways. Their token-count
// histograms end at 2000, so the sim runs with max-model-len 2048.
func TestMetricsMatchCurrentVLLM(t *testing.T) {
	got := scrapeSim(t, Options{EngineConfig: EngineConfig{MaxModelLen: 2048}})
	for _, fixture := range []string{"v1-2026-09-inferstack-qwen2.5-1.5b.prom", "v1-2026-08-blackbox-rca-cpu.prom"} {
		t.Run(fixture, func(t *testing.T) {
			want := readFixture(t, fixture)
			for name, w := range want {
				g, ok := got[name]
				if !ok {
					t.Errorf("%s: in the real scrape, missing from the sim", name)
					continue
				}
				// cache_config_info's labels are the engine's config fields,
				// which change with every release: held to the newest scrape.
				checkLabels := name != "vllm:cache_config_info" || strings.Contains(fixture, "inferstack")
				compareFamily(t, name, g, w, checkLabels)
			}
			for name := range got {
				if _, ok := want[name]; !ok {
					t.Errorf("%s: exposed by the sim, absent from the real scrape", name)
				}
			}
		})
	}
}

func compareFamily(t *testing.T, name string, got, want family, checkLabels bool) {
	t.Helper()
	if got.typ != want.typ {
		t.Errorf("%s: type %v, real vLLM has %v", name, got.typ, want.typ)
	}
	if checkLabels && !slices.Equal(got.labels, want.labels) {
		t.Errorf("%s: labels %v, real vLLM has %v", name, got.labels, want.labels)
	}
	if !slices.Equal(got.buckets, want.buckets) {
		t.Errorf("%s: buckets %v, real vLLM has %v", name, got.buckets, want.buckets)
	}
}

// Legacy: the only recorded pre-2026 scrape is a v0.5 (V0 engine, 2024)
// one, older than the late-2025 V1 generation --legacy-metrics stands for.
// Every difference between the two is listed here with its reason; anything
// else is drift.
var (
	// v05Only are families of the V0 engine that V1 never had.
	v05Only = map[string]string{
		"vllm:num_requests_swapped":                  "V0 swapped to CPU; V1 recomputes",
		"vllm:cpu_cache_usage_perc":                  "V0 CPU swap space",
		"vllm:avg_prompt_throughput_toks_per_s":      "V0 gauge; V1 logs it instead",
		"vllm:avg_generation_throughput_toks_per_s":  "V0 gauge; V1 logs it instead",
		"vllm:request_params_best_of":                "best_of was removed",
		"vllm:spec_decode_draft_acceptance_rate":     "V0 speculative decoding (not simulated)",
		"vllm:spec_decode_efficiency":                "V0 speculative decoding (not simulated)",
		"vllm:spec_decode_num_accepted_tokens_total": "V0 speculative decoding (not simulated)",
		"vllm:spec_decode_num_draft_tokens_total":    "V0 speculative decoding (not simulated)",
		"vllm:spec_decode_num_emitted_tokens_total":  "V0 speculative decoding (not simulated)",
	}
	// addedAfterV05 are families the late-2025 generation has and v0.5 lacked.
	addedAfterV05 = []string{
		"vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_hits_total",
		"vllm:iteration_tokens_total", "vllm:request_max_num_generation_tokens", "vllm:request_params_max_tokens",
		"vllm:request_queue_time_seconds", "vllm:request_inference_time_seconds",
		"vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
	}
	// changedBuckets are the histograms whose layout V1 changed; the sim
	// follows the V1 layout (the same as the 2026 scrapes).
	changedBuckets = map[string]string{
		"vllm:time_to_first_token_seconds":   "V1 appended 20 … 2560",
		"vllm:time_per_output_token_seconds": "V1 appended 5 … 80",
		"vllm:e2e_request_latency_seconds":   "V1 replaced 1 … 60 with 0.3 … 7680",
	}
)

// TestMetricsMatchLegacyVLLM holds --legacy-metrics to the v0.5 scrape with
// the differences above, and checks the renamed families carry their old
// names only.
func TestMetricsMatchLegacyVLLM(t *testing.T) {
	// The v0.5 token-count buckets end at 10000: max_model_len in [10000, 20000).
	got := scrapeSim(t, Options{LegacyMetrics: true, EngineConfig: EngineConfig{MaxModelLen: 16384}})
	want := readFixture(t, "v0.5.x-2024-08-kubeai.prom")
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			if _, known := v05Only[name]; !known {
				t.Errorf("%s: in the v0.5 scrape, missing from the legacy sim and not a known V0-only family", name)
			}
			continue
		}
		if g.typ != w.typ {
			t.Errorf("%s: type %v, v0.5 has %v", name, g.typ, w.typ)
		}
		if name != "vllm:cache_config_info" {
			extra := slices.DeleteFunc(slices.Clone(g.labels), func(l string) bool { return slices.Contains(w.labels, l) })
			missing := slices.DeleteFunc(slices.Clone(w.labels), func(l string) bool { return slices.Contains(g.labels, l) })
			if len(missing) > 0 || !slices.Equal(extra, []string{"engine"}) {
				t.Errorf("%s: labels %v, v0.5 has %v (only engine may be added)", name, g.labels, w.labels)
			}
		}
		if _, changed := changedBuckets[name]; changed {
			if name != "vllm:e2e_request_latency_seconds" && !isPrefix(w.buckets, g.buckets) {
				t.Errorf("%s: buckets %v do not extend v0.5's %v", name, g.buckets, w.buckets)
			}
			continue
		}
		if !slices.Equal(g.buckets, w.buckets) {
			t.Errorf("%s: buckets %v, v0.5 has %v", name, g.buckets, w.buckets)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok && !slices.Contains(addedAfterV05, name) {
			t.Errorf("%s: exposed by the legacy sim, neither in the v0.5 scrape nor a known later addition", name)
		}
	}
	for _, current := range []string{"vllm:kv_cache_usage_perc", "vllm:inter_token_latency_seconds", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"} {
		if _, ok := got[current]; ok {
			t.Errorf("%s: a 2026 name exposed in legacy mode", current)
		}
	}
	// The late-2025 layout is the 2026 one for every histogram both have.
	current := readFixture(t, "v1-2026-09-inferstack-qwen2.5-1.5b.prom")
	for name := range changedBuckets {
		ref := name
		if name == "vllm:time_per_output_token_seconds" {
			ref = "vllm:inter_token_latency_seconds"
		}
		if !slices.Equal(got[name].buckets, current[ref].buckets) {
			t.Errorf("%s: buckets %v, the V1 layout is %v", name, got[name].buckets, current[ref].buckets)
		}
	}
}

// isPrefix says the finite bounds of prefix start the finite bounds of s.
func isPrefix(prefix, s []float64) bool {
	prefix, s = finite(prefix), finite(s)
	return len(prefix) <= len(s) && slices.Equal(prefix, s[:len(prefix)])
}

func finite(b []float64) []float64 {
	return slices.DeleteFunc(slices.Clone(b), func(v float64) bool { return math.IsInf(v, 1) })
}
