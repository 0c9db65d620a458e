package vllmsim

import (
	"context"
	"math"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/fixtures"

	dto "github.com/prometheus/client_model/go"
)

// The SGLang drift test holds the sim's SGLang exposition, era by era, to
// the real scrapes in sglang-metrics/ under $AUTOCAPTURE_FIXTURES (see its
// SOURCES.md): every sglang: family's type, label names, buckets and HELP,
// both ways, and the text itself as prometheus_client prints it. The 2026
// era has no real scrape; it is held to SGLANG.md §2–§3 (sglang2026 below).

// sglFamily is the shape of one family, HELP included.
type sglFamily struct {
	family
	help string
}

func parseSGLang(t *testing.T, text string) map[string]sglFamily {
	t.Helper()
	out := map[string]sglFamily{}
	for name, mf := range parseExposition(t, text) {
		if strings.HasPrefix(name, "sglang:") {
			out[name] = sglFamily{family: shapeOf(mf), help: mf.GetHelp()}
		}
	}
	return out
}

// sglangFixtures are the recorded scrapes of each era (SOURCES.md).
var sglangFixtures = map[string][]string{
	SGLangEra035: {"v0.3.5-2024-11-docs-gemma2-9b-name-label.prom"},
	SGLangEra04:  {"v0.3.6-0.4-docs-llama3.1-8b-one-request.prom", "v0.3.6-0.4-docs-llama3.1-8b-overloaded.prom"},
}

// busySGLang builds an SGLang sim of era and drives it through what makes
// every series it declares appear: retractions (kv-pressure), client
// aborts, prefix-cache hits, chunked prefills, and one non-streamed HTTP
// request beside the streamed built-in load. It returns the exposition.
func busySGLang(t *testing.T, era, model string) (*Sim, string) {
	t.Helper()
	s, err := New(Options{Engine: EngineSGLang, SGLangEra: era, Model: model, Scenario: ScenarioKVPressure, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	s.Advance(20 * time.Second)
	if err := s.SetScenario(ScenarioClientAborts); err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 1)
	go func() {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("POST", "/v1/completions", strings.NewReader(`{"prompt":"the quick brown fox","max_tokens":8}`))
		s.Handler().ServeHTTP(rec, req.WithContext(context.Background()))
		done <- rec.Code
	}()
	waitArrived(t, s)
	s.Advance(30 * time.Second)
	if code := <-done; code != 200 {
		t.Fatalf("POST /v1/completions: %d", code)
	}
	return s, scrape(t, s)
}

// waitArrived waits until the HTTP request submitted by another goroutine
// is in the engine.
func waitArrived(t *testing.T, s *Sim) {
	t.Helper()
	for range 2000 {
		s.mu.Lock()
		in := slices.ContainsFunc(s.eng.waiting, func(r *request) bool { return !r.stream }) ||
			slices.ContainsFunc(s.eng.running, func(r *request) bool { return !r.stream })
		s.mu.Unlock()
		if in {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("the HTTP request never reached the engine")
}

func scrape(t *testing.T, s *Sim) string {
	t.Helper()
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("GET /metrics: %d", rec.Code)
	}
	if ct := rec.Header().Get("Content-Type"); ct != contentTypePython {
		t.Errorf("Content-Type %q, prometheus_client sends %q", ct, contentTypePython)
	}
	return rec.Body.String()
}

// TestSGLangMetricsMatchRealScrapes: for each era with recorded scrapes,
// every sglang: family of every scrape is in the sim's exposition with the
// same type, label names, buckets and HELP, and the sim prints no family
// the era's scrapes lack.
func TestSGLangMetricsMatchRealScrapes(t *testing.T) {
	for era, files := range sglangFixtures {
		t.Run(era, func(t *testing.T) {
			_, text := busySGLang(t, era, "m")
			got := parseSGLang(t, text)
			union := map[string]bool{}
			for _, file := range files {
				want := parseSGLang(t, string(fixtures.Read(t, filepath.Join("sglang-metrics", file))))
				for name, w := range want {
					union[name] = true
					g, ok := got[name]
					if !ok {
						t.Errorf("%s: %s: in the real scrape, missing from the sim", file, name)
						continue
					}
					if g.typ != w.typ || !slices.Equal(g.labels, w.labels) || !slices.Equal(g.buckets, w.buckets) || g.help != w.help {
						t.Errorf("%s: %s: sim has type %v, labels %v, buckets %v, HELP %q; real SGLang has %v, %v, %v, %q",
							file, name, g.typ, g.labels, g.buckets, g.help, w.typ, w.labels, w.buckets, w.help)
					}
				}
			}
			for name := range got {
				if !union[name] {
					t.Errorf("%s: printed by the sim for era %s, in none of its real scrapes", name, era)
				}
			}
		})
	}
}

var (
	sampleLine = regexp.MustCompile(`^([^{ ]+)(\{[^}]*\})? (\S+)$`)
	labelPair  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

// shape masks a sample line's value and label values (le kept), leaving
// what a text reader sees of the format: names, label order, le strings.
func shape(t *testing.T, line string) string {
	t.Helper()
	if strings.HasPrefix(line, "#") {
		return line
	}
	m := sampleLine.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("not a sample line: %q", line)
	}
	labels := labelPair.ReplaceAllStringFunc(m[2], func(p string) string {
		if strings.HasPrefix(p, `le="`) {
			return p
		}
		return p[:strings.IndexByte(p, '=')] + `="…"`
	})
	return m[1] + labels + " V"
}

// blocks splits an exposition into families: name → lines.
func blocks(text string) map[string][]string {
	out := map[string][]string{}
	var cur string
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		if rest, ok := strings.CutPrefix(line, "# HELP "); ok {
			cur, _, _ = strings.Cut(rest, " ")
		}
		out[cur] = append(out[cur], line)
	}
	return out
}

// TestSGLangTextMatchesRealScrapes compares the text itself: for every
// family of a real scrape, the sim's block has the same lines once values
// and label values are masked (HELP and TYPE lines, _sum then buckets then
// _count, labels sorted with le among them, le printed as Python floats:
// "1.0", "0.07500000000000001"); and every number in both, real and
// simulated, is what pyFloat prints for it (Python repr, with
// prometheus_client's exponent switch: 8.128902e+06).
func TestSGLangTextMatchesRealScrapes(t *testing.T) {
	for era, files := range sglangFixtures {
		t.Run(era, func(t *testing.T) {
			_, text := busySGLang(t, era, "m")
			got := blocks(text)
			for _, file := range files {
				real := string(fixtures.Read(t, filepath.Join("sglang-metrics", file)))
				for name, want := range blocks(real) {
					g := got[name]
					// One series per family in the recorded scrapes; the sim
					// has the same (one model, no per-stream split before 2026).
					if len(g) != len(want) {
						t.Errorf("%s: %s: %d lines, real %d", file, name, len(g), len(want))
						continue
					}
					for i := range want {
						if gs, ws := shape(t, g[i]), shape(t, want[i]); gs != ws {
							t.Errorf("%s: %s line %d:\n sim  %s\n real %s", file, name, i, gs, ws)
						}
					}
				}
				checkNumbers(t, file, real)
			}
			checkNumbers(t, "sim", text)
			if strings.Contains(text, "_created") || strings.Contains(text, "process_") || strings.Contains(text, "python_") {
				t.Error("the sim prints _created, process_ or python_ series; multiprocess mode has none")
			}
		})
	}
}

// checkNumbers holds every sample value and le of text to pyFloat.
func checkNumbers(t *testing.T, what, text string) {
	t.Helper()
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		nums := []string{m[3]}
		for _, p := range labelPair.FindAllStringSubmatch(m[2], -1) {
			if p[1] == "le" {
				nums = append(nums, p[2])
			}
		}
		for _, num := range nums {
			v, err := strconv.ParseFloat(num, 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", what, line, err)
			}
			if pyFloat(v) != num {
				t.Errorf("%s: %q prints as %q through pyFloat", what, num, pyFloat(v))
			}
			n++
		}
	}
	if n == 0 {
		t.Errorf("%s: no numbers", what)
	}
}

// sglang2026 is the 2026 collector as SGLANG.md states it, for want of a
// real 2026 scrape (SOURCES.md: none could be copied whole). Labels follow
// §2 (scheduler families: model_name, engine_type, tp_rank, pp_rank,
// moe_ep_rank; tokenizer families: model_name, engine_type) plus the
// per-family label §3 names; buckets are §3's where it lists them (nil:
// §3 gives none to check); HELP is checked where §3 quotes it. Every row is
// a family §3 names; the sim must print exactly these.
var (
	sched2026 = []string{"engine_type", "model_name", "moe_ep_rank", "pp_rank", "tp_rank"}
	tok2026   = []string{"engine_type", "model_name"}
)

type want2026 struct {
	typ     dto.MetricType
	labels  []string
	buckets []float64
	help    string
}

func sglang2026() map[string]want2026 {
	g, c, h := dto.MetricType_GAUGE, dto.MetricType_COUNTER, dto.MetricType_HISTOGRAM
	s := func(extra ...string) []string {
		l := append(slices.Clone(sched2026), extra...)
		slices.Sort(l)
		return l
	}
	tk := func(extra ...string) []string { l := append(slices.Clone(tok2026), extra...); slices.Sort(l); return l }
	inf := math.Inf(1)
	// §3 "Tokenizer histograms" and "Scheduler histograms".
	ttft := []float64{0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, inf}
	e2e := append(slices.Clone(ttft[:len(ttft)-1]), 600, 1200, 1800, 2400, inf)
	itl := []float64{0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08, 0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, inf}
	queue := []float64{0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20}
	for v := 30.0; v <= 100; v += 10 {
		queue = append(queue, v)
	}
	for v := 200.0; v <= 1000; v += 100 {
		queue = append(queue, v)
	}
	queue = append(queue, 1200, 1400, 1600, 1800, 2000, 2500, 3000, inf)
	var stage []float64
	for k := range 30 {
		stage = append(stage, 0.001*math.Pow(1.62, float64(k)))
	}
	stage = append(stage, inf)
	w := map[string]want2026{
		// §3 "Scheduler gauges".
		"sglang:num_running_reqs":       {g, s(), nil, ""},
		"sglang:num_queue_reqs":         {g, s(), nil, "The number of requests in the waiting queue."},
		"sglang:num_grammar_queue_reqs": {g, s(), nil, ""},
		"sglang:gen_throughput":         {g, s(), nil, ""},
		"sglang:cache_hit_rate":         {g, s(), nil, "The prefix cache hit rate."},
		"sglang:decode_sum_seq_lens":    {g, s(), nil, ""},
		"sglang:token_usage":            {g, s(), nil, ""},
		"sglang:full_token_usage":       {g, s(), nil, ""},
		"sglang:swa_token_usage":        {g, s(), nil, ""},
		"sglang:mamba_usage":            {g, s(), nil, ""},
		"sglang:num_used_tokens":        {g, s(), nil, ""},
		// §1: gauges of prometheus_client's default mode get a pid label.
		"sglang:num_retracted_reqs":               {g, s("pid"), nil, ""},
		"sglang:num_paused_reqs":                  {g, s("pid"), nil, ""},
		"sglang:num_prefill_bootstrap_queue_reqs": {g, s(), nil, ""},
		"sglang:num_prefill_inflight_queue_reqs":  {g, s(), nil, ""},
		"sglang:num_decode_prealloc_queue_reqs":   {g, s(), nil, ""},
		"sglang:num_decode_transfer_queue_reqs":   {g, s(), nil, ""},
		"sglang:pending_prealloc_token_usage":     {g, s(), nil, ""},
		"sglang:utilization":                      {g, s(), nil, ""},
		"sglang:fwd_occupancy":                    {g, s(), nil, ""},
		"sglang:new_token_ratio":                  {g, s(), nil, ""},
		"sglang:is_cuda_graph":                    {g, s(), nil, ""},
		"sglang:num_unique_running_routing_keys":  {g, s(), nil, ""},
		// §3 constants.
		"sglang:max_total_num_tokens":            {g, s(), nil, ""},
		"sglang:weight_memory_usage_gb":          {g, s(), nil, ""},
		"sglang:kv_cache_memory_usage_gb":        {g, s(), nil, ""},
		"sglang:page_size":                       {g, s(), nil, ""},
		"sglang:num_pages":                       {g, s(), nil, ""},
		"sglang:context_len":                     {g, s(), nil, ""},
		"sglang:startup_available_gpu_memory_gb": {g, s(), nil, ""},
		// §3 "Scheduler counters".
		"sglang:num_retracted_requests_total":      {c, s(), nil, ""},
		"sglang:num_retracted_input_tokens_total":  {c, s(), nil, ""},
		"sglang:num_retracted_output_tokens_total": {c, s(), nil, ""},
		"sglang:realtime_tokens_total":             {c, s("mode"), nil, ""},
		"sglang:prefill_effective_tokens_total":    {c, s("mode"), nil, ""},
		"sglang:cuda_graph_passes_total":           {c, s("mode"), nil, ""},
		// §3 "Scheduler histograms".
		"sglang:queue_time_seconds":            {h, s(), queue, ""},
		"sglang:per_stage_req_latency_seconds": {h, s("stage"), stage, ""},
		// §3 "Tokenizer counters", "Tokenizer histograms", "Tokenizer gauges".
		"sglang:prompt_tokens_total":              {c, tk("is_streaming"), nil, ""},
		"sglang:generation_tokens_total":          {c, tk("is_streaming"), nil, ""},
		"sglang:num_requests_total":               {c, tk("is_streaming"), nil, ""},
		"sglang:cached_tokens_total":              {c, tk("cache_source"), nil, ""},
		"sglang:num_aborted_requests_total":       {c, tk(), nil, ""},
		"sglang:time_to_first_token_seconds":      {h, tk("is_streaming"), ttft, ""},
		"sglang:inter_token_latency_seconds":      {h, tk(), itl, ""},
		"sglang:e2e_request_latency_seconds":      {h, tk("is_streaming"), e2e, ""},
		"sglang:prompt_tokens_histogram":          {h, tk(), nil, ""},
		"sglang:uncached_prompt_tokens_histogram": {h, tk(), nil, ""},
		"sglang:generation_tokens_histogram":      {h, tk(), nil, ""},
		"sglang:startup_time_seconds":             {g, tk("phase"), nil, ""},
	}
	for _, pool := range []string{"kv", "swa", "mamba"} {
		for _, what := range []string{"available", "evictable", "used"} {
			w["sglang:"+pool+"_"+what+"_tokens"] = want2026{g, s(), nil, ""}
		}
	}
	for _, spec := range []string{"accept_length", "accept_rate", "cap_length", "block_accept_length", "num_steps", "num_draft_tokens"} {
		w["sglang:spec_"+spec] = want2026{g, s(), nil, ""}
	}
	return w
}

// TestSGLang2026MatchesSGLangMD holds the default era to sglang2026, both
// ways, and checks the token histograms' bounds run 100 … 1.1e6 (§3).
func TestSGLang2026MatchesSGLangMD(t *testing.T) {
	_, text := busySGLang(t, SGLangEra2026, "m")
	got := parseSGLang(t, text)
	want := sglang2026()
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			t.Errorf("%s: SGLANG.md §3 names it, the sim does not print it", name)
			continue
		}
		if g.typ != w.typ || !slices.Equal(g.labels, w.labels) {
			t.Errorf("%s: type %v, labels %v; SGLANG.md: %v, %v", name, g.typ, g.labels, w.typ, w.labels)
		}
		if w.buckets != nil && !slices.Equal(g.buckets, w.buckets) {
			t.Errorf("%s: buckets %v; SGLANG.md §3: %v", name, g.buckets, w.buckets)
		}
		if w.help != "" && g.help != w.help {
			t.Errorf("%s: HELP %q; SGLANG.md §3 quotes %q", name, g.help, w.help)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s: printed by the sim, not in the SGLANG.md table", name)
		}
	}
	tokens := got["sglang:prompt_tokens_histogram"].buckets
	if len(tokens) < 3 || tokens[0] != 100 || tokens[len(tokens)-2] != 1.1e6 {
		t.Errorf("token histogram bounds %v: SGLANG.md §3 gives 100 … 1.1e6", tokens)
	}
	checkNumbers(t, "sim 2026", text)
}
