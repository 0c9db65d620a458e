package vllmsim

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// Engines the sim can present (Options.Engine).
const (
	EngineVLLM   = "vllm"
	EngineSGLang = "sglang"
)

// SGLang metric generations (Options.SGLangEra, --sglang-era), as
// /work/shared/SGLANG.md §2 dates them.
const (
	// SGLangEra2026 is the 2026 collector (SGLANG.md §3): scheduler
	// families labelled model_name, engine_type, tp_rank, pp_rank,
	// moe_ep_rank; tokenizer families model_name, engine_type and, where §3
	// says, is_streaming. The default; the only era with spans.
	SGLangEra2026 = "2026"
	// SGLangEra04 is v0.3.6–v0.4.x (PR #1981): 12 families labelled
	// model_name, legacy buckets, time_per_output_token_seconds and
	// func_latency_seconds{name} (fixtures 2–3).
	SGLangEra04 = "0.4"
	// SGLangEra035 is v0.3.5 (PR #1853): 21 families labelled name,
	// cache_hit_rate as a percent, waiting_request_latency_seconds (fixture 1).
	SGLangEra035 = "0.3.5"
)

// SGLangEras returns the SGLang metric generations, newest first.
func SGLangEras() []string { return []string{SGLangEra2026, SGLangEra04, SGLangEra035} }

// SGLang constants the surface follows.
const (
	// sglangDecodeLogInterval is --decode-log-interval's default: the
	// scheduler gauges are written every 40 decode batches (SGLANG.md §1).
	sglangDecodeLogInterval = 40
	// sglangIdleLogInterval is how often 2026 builds write the scheduler
	// gauges while idle (_maybe_log_idle_metrics, SGLANG.md §1).
	sglangIdleLogInterval = 30 * time.Second
	// sglangForceStreamInterval is DEFAULT_FORCE_STREAM_INTERVAL: a
	// non-streamed request's output reaches the tokenizer every 50 tokens or
	// at finish, so its TTFT is the time to 50 tokens or ≈ e2e (SGLANG.md §4).
	sglangForceStreamInterval = 50
)

// engineDefaults checks Engine and SGLangEra and applies the defaults that
// depend on them (version, service name).
func (o *Options) engineDefaults() error {
	switch o.Engine {
	case "", EngineVLLM:
		o.Engine = EngineVLLM
		if o.SGLangEra != "" {
			return fmt.Errorf("sglang era %q: only with engine %s", o.SGLangEra, EngineSGLang)
		}
		if o.Version == "" {
			o.Version = "0.15.1"
			if o.LegacyMetrics {
				o.Version = "0.10.2"
			}
		}
		if o.ServiceName == "" {
			o.ServiceName = "vllm-server"
		}
	case EngineSGLang:
		if o.LegacyMetrics {
			return fmt.Errorf("legacy metrics are vLLM's; with engine %s set the sglang era", EngineSGLang)
		}
		if o.SGLangEra == "" {
			o.SGLangEra = SGLangEra2026
		}
		versions := map[string]string{SGLangEra2026: "0.5.23", SGLangEra04: "0.4.0", SGLangEra035: "0.3.5"}
		v, ok := versions[o.SGLangEra]
		if !ok {
			return fmt.Errorf("sglang era %q: want one of %v", o.SGLangEra, SGLangEras())
		}
		if o.Version == "" {
			o.Version = v
		}
		// SGLang hard-codes service.name (SGLANG.md §6); OTEL_SERVICE_NAME
		// does not change it.
		o.ServiceName = "sglang"
	default:
		return fmt.Errorf("engine %q: want %s or %s", o.Engine, EngineVLLM, EngineSGLang)
	}
	return nil
}

// sglangTraces says whether the SGLang era in o exports spans: tracing
// (--enable-trace, SGLANG.md §6) came after the 0.4 era.
func (o Options) sglangTraces() bool { return o.Engine != EngineSGLang || o.SGLangEra == SGLangEra2026 }

// Buckets as SGLang declares them (SGLANG.md §3 for 2026; the legacy ones
// as the recorded scrapes of their era show them).
var (
	sglBucketsTTFT = []float64{0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400}
	sglBucketsE2E  = append(slices.Clone(sglBucketsTTFT), 600, 1200, 1800, 2400)
	sglBucketsITL  = []float64{0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035,
		0.04, 0.06, 0.08, 0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8}
	sglBucketsQueue = []float64{0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20,
		30, 40, 50, 60, 70, 80, 90, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000,
		1200, 1400, 1600, 1800, 2000, 2500, 3000}
	sglBucketsStage  = sglExponential(0.001, 1.62, 30)
	sglBucketsTokens = []float64{100, 300, 500, 700, 1000, 1500, 2000, 3000, 4000, 5000, 6000, 7000,
		8000, 9000, 10000, 12500, 15000, 17500, 20000, 22500, 25000, 27500, 30000, 35000, 40000,
		60000, 80000, 100000, 200000, 300000, 400000, 600000, 800000, 1000000, 1100000}

	sglLegacyTTFT = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1,
		2.5, 5, 7.5, 10, 15, 20, 25, 30}
	sglLegacyTPOT = []float64{0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15,
		0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5}
	sglLegacyE2E    = []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60}
	sglLegacyFunc   = sglExponential(0.05, 1.5, 18)
	sglV035Requests = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000}
)

// sglExponential is SGLang's exponential_buckets: start * width**k for k <
// length, each computed with a power, not a running product, so the printed
// floats match the recorded scrapes (0.05·1.5² prints 0.1125, where a running
// product gives 0.11250000000000002). math.Pow is exact for 1.5^k; for 1.62^k
// it may differ from C's pow in the last bit, which no scrape can check.
func sglExponential(start, width float64, length int) []float64 {
	out := make([]float64, length)
	for k := range out {
		out[k] = start * math.Pow(width, float64(k))
	}
	return out
}

// sglangStats is the scheduler's stats object: fields set at log points,
// every gauge written from it at each one (log_stats).
type sglangStats struct {
	running, queue          int
	usedTokens, maxTokens   int
	evictable               int
	tokenUsage, fullUsage   float64
	genThroughput           float64
	cacheHitRate            float64
	decodeSumSeqLens        int
	retracted               int // since the last log point
	newSeq, newToken, cache int // the last prefill batch (v0.3.5 gauges)
	isCudaGraph             float64
	fwdOccupancy            float64
	newTokenRatio           float64
}

// sglGauge is a gauge written at every log point.
type sglGauge struct {
	f     *pyFamily
	extra []string // label values after the scheduler's (the pid of a non-"mostrecent" gauge)
	val   func(*sglangStats) float64
}

// sglangMetrics is SGLang's /metrics for one era: the families that era
// declares, the state behind its log points and its per-request tokenizer
// bookkeeping. Every method runs with Sim.mu held.
type sglangMetrics struct {
	era   string
	pid   string // the scheduler process's (pid labels, thread spans)
	reg   *pyRegistry
	sched []string // scheduler label values
	tok   []string // tokenizer label values
	cfg   EngineConfig

	gauges []sglGauge
	stats  sglangStats

	// 2026 tokenizer
	promptTotal, genTotal, requestsTotal, abortedTotal, cachedTotal *pyFamily
	ttft, itl, e2e, promptHist, uncachedHist, genHist               *pyFamily
	// 2026 scheduler
	retractedTotal, retractedIn, retractedOut, realtime, effective, cudaGraph *pyFamily
	queueTime, stage                                                          *pyFamily
	// 0.4
	tpot, funcLatency *pyFamily
	// 0.3.5
	reqPrompt, reqGen, waitingLatency *pyFamily

	decodeBatches  int
	lastLog        time.Duration
	lastDecodeLog  time.Duration
	genSinceDecode int
	busy           time.Duration
	batchNew       int // requests admitted for the first time since the last prefill log
	batchCached    int // their cached tokens
	pendingCompute int // realtime tokens not yet flushed at a log point
	pendingCache   int
	pendingDecode  int
}

func newSGLangMetrics(o Options) *sglangMetrics {
	m := &sglangMetrics{era: o.SGLangEra, reg: newPyRegistry(), cfg: o.EngineConfig, pid: strconv.FormatUint(4000+o.Seed%60000, 10)}
	m.stats.newTokenRatio = 0.7
	m.stats.fwdOccupancy = math.NaN()
	switch o.SGLangEra {
	case SGLangEra035:
		m.build035(o.Model)
	case SGLangEra04:
		m.build04(o.Model)
	default:
		m.build2026(o.Model, m.pid)
	}
	m.stats.maxTokens = m.cfg.NumGPUBlocks * m.cfg.BlockSize
	return m
}

var (
	sglSchedLabels = []string{"model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"}
	sglTokLabels   = []string{"model_name", "engine_type"}
)

func plus(names []string, more ...string) []string { return append(slices.Clone(names), more...) }

// build2026 declares the 2026 collector's families (SGLANG.md §3; HELP
// texts as metrics_collector.py@016d8605 spells them): the tokenizer's,
// then the scheduler's gauges (all written at each log point), counters and
// histograms. Families a unified server without LoRA, HiCache, PD,
// speculative decoding, grammar or MFU accounting never writes are not
// declared: they would never print.
func (m *sglangMetrics) build2026(model, pid string) {
	r := m.reg
	m.sched = []string{model, "unified", "0", "0", "0"}
	m.tok = []string{model, "unified"}
	startup := r.family("sglang:startup_time_seconds", "Engine startup duration by phase in seconds.", pyGauge, plus(sglTokLabels, "phase"), nil)
	for _, p := range []struct {
		phase string
		sec   float64
	}{{"load_weight", 8.4}, {"kv_cache_allocation", 1.2}, {"scheduler_e2e", 31.7}, {"tokenizer_e2e", 33.9}} {
		startup.with(plus(m.tok, p.phase)...).set(p.sec)
	}
	m.promptTotal = r.family("sglang:prompt_tokens_total", "Number of prefill tokens processed.", pyCounter, plus(sglTokLabels, "is_streaming"), nil)
	m.genTotal = r.family("sglang:generation_tokens_total", "Number of generation tokens processed.", pyCounter, plus(sglTokLabels, "is_streaming"), nil)
	m.promptHist = r.family("sglang:prompt_tokens_histogram", "Histogram of prompt token length.", pyHistogram, sglTokLabels, sglBucketsTokens)
	m.uncachedHist = r.family("sglang:uncached_prompt_tokens_histogram", "Histogram of uncached (compute) prompt token length.", pyHistogram, sglTokLabels, sglBucketsTokens)
	m.genHist = r.family("sglang:generation_tokens_histogram", "Histogram of generation token length.", pyHistogram, sglTokLabels, sglBucketsTokens)
	m.cachedTotal = r.family("sglang:cached_tokens_total", "Number of cached prompt tokens by source (device/host/storage).", pyCounter, plus(sglTokLabels, "cache_source"), nil)
	m.requestsTotal = r.family("sglang:num_requests_total", "Number of requests processed.", pyCounter, plus(sglTokLabels, "is_streaming"), nil)
	m.abortedTotal = r.family("sglang:num_aborted_requests_total", "Number of requests aborted.", pyCounter, sglTokLabels, nil)
	m.ttft = r.family("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", pyHistogram, plus(sglTokLabels, "is_streaming"), sglBucketsTTFT)
	m.itl = r.family("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", pyHistogram, sglTokLabels, sglBucketsITL)
	m.e2e = r.family("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", pyHistogram, plus(sglTokLabels, "is_streaming"), sglBucketsE2E)

	g := func(name, help string, val func(*sglangStats) float64) {
		m.gauges = append(m.gauges, sglGauge{f: r.family(name, help, pyGauge, sglSchedLabels, nil), val: val})
	}
	zero := func(*sglangStats) float64 { return 0 }
	g("sglang:num_running_reqs", "The number of running requests.", func(s *sglangStats) float64 { return float64(s.running) })
	g("sglang:num_queue_reqs", "The number of requests in the waiting queue.", func(s *sglangStats) float64 { return float64(s.queue) })
	g("sglang:num_grammar_queue_reqs", "The number of requests in the grammar waiting queue.", zero)
	g("sglang:gen_throughput", "The generation throughput (token/s).", func(s *sglangStats) float64 { return s.genThroughput })
	g("sglang:cache_hit_rate", "The prefix cache hit rate.", func(s *sglangStats) float64 { return s.cacheHitRate })
	g("sglang:decode_sum_seq_lens", "The sum of all sequence lengths in decode.", func(s *sglangStats) float64 { return float64(s.decodeSumSeqLens) })
	g("sglang:token_usage", "The token usage.", func(s *sglangStats) float64 { return s.tokenUsage })
	g("sglang:full_token_usage", "The token usage for full attention layers.", func(s *sglangStats) float64 { return s.fullUsage })
	g("sglang:swa_token_usage", "The token usage for SWA layers.", zero)
	g("sglang:mamba_usage", "The token usage for Mamba layers.", zero)
	g("sglang:num_used_tokens", "The number of used tokens.", func(s *sglangStats) float64 { return float64(s.usedTokens) })
	g("sglang:kv_available_tokens", "Number of free token slots in the KV cache pool.", func(s *sglangStats) float64 {
		return float64(max(0, s.maxTokens-s.usedTokens-s.evictable))
	})
	g("sglang:kv_evictable_tokens", "Number of evictable (radix-cached) token slots in the KV cache pool.", func(s *sglangStats) float64 { return float64(s.evictable) })
	g("sglang:kv_used_tokens", "Number of actively used token slots in the KV cache pool.", func(s *sglangStats) float64 { return float64(s.usedTokens) })
	for _, pool := range []struct{ name, what string }{{"swa", "token slots in the SWA pool"}, {"mamba", "state slots in the mamba SSM pool"}} {
		g("sglang:"+pool.name+"_available_tokens", availableHelp[pool.name], zero)
		g("sglang:"+pool.name+"_evictable_tokens", "Number of evictable (radix-cached) "+pool.what+".", zero)
		g("sglang:"+pool.name+"_used_tokens", "Number of actively used "+pool.what+".", zero)
	}
	for _, spec := range [][2]string{
		{"sglang:spec_accept_length", "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward)."},
		{"sglang:spec_accept_rate", "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch)."},
		{"sglang:spec_cap_length", "Mean DSpark confidence-scheduled verify window per verify step, incl the bonus slot (0 when no cap is scheduled)."},
		{"sglang:spec_block_accept_length", "Mean uncapped full-block accept length per verify step (accept + cap-trimmed drafts; exact only in DSpark cap-accept mode)."},
		{"sglang:spec_num_steps", "Currently active speculative_num_steps."},
		{"sglang:spec_num_draft_tokens", "Currently active speculative_num_draft_tokens (decouples from steps under topk>1)."},
	} {
		g(spec[0], spec[1], zero)
	}
	// The two retract gauges keep prometheus_client's default multiprocess
	// mode, which adds a pid label (SGLANG.md §1).
	withPid := func(name, help string, val func(*sglangStats) float64) {
		f := r.family(name, help, pyGauge, plus(sglSchedLabels, "pid"), nil)
		m.gauges = append(m.gauges, sglGauge{f: f, extra: []string{pid}, val: val})
	}
	withPid("sglang:num_retracted_reqs", "The number of retracted requests.", func(s *sglangStats) float64 { return float64(s.retracted) })
	withPid("sglang:num_paused_reqs", "The number of paused requests by async weight sync.", zero)
	for _, q := range [][2]string{
		{"sglang:num_prefill_bootstrap_queue_reqs", "The number of requests in the prefill bootstrap queue."},
		{"sglang:num_prefill_inflight_queue_reqs", "The number of requests in the prefill inflight queue."},
		{"sglang:num_decode_prealloc_queue_reqs", "The number of requests in the decode prealloc queue."},
		{"sglang:num_decode_transfer_queue_reqs", "The number of requests in the decode transfer queue."},
	} {
		g(q[0], q[1], zero)
	}
	g("sglang:pending_prealloc_token_usage", "The token usage for pending preallocated tokens (not preallocated yet).", zero)
	g("sglang:utilization", "The utilization.", zero)
	g("sglang:fwd_occupancy", "Forward pass GPU occupancy percentage.", func(s *sglangStats) float64 { return s.fwdOccupancy })
	g("sglang:new_token_ratio", "The new token ratio.", func(s *sglangStats) float64 { return s.newTokenRatio })
	g("sglang:is_cuda_graph", "Whether the batch is using CUDA graph.", func(s *sglangStats) float64 { return s.isCudaGraph })
	g("sglang:num_unique_running_routing_keys", "Number of unique routing keys in running batch.", zero)

	m.retractedTotal = r.family("sglang:num_retracted_requests_total", "Total number of retracted requests.", pyCounter, sglSchedLabels, nil)
	m.retractedIn = r.family("sglang:num_retracted_input_tokens_total", "Total number of retracted input tokens.", pyCounter, sglSchedLabels, nil)
	m.retractedOut = r.family("sglang:num_retracted_output_tokens_total", "Total number of retracted output tokens.", pyCounter, sglSchedLabels, nil)
	m.cudaGraph = r.family("sglang:cuda_graph_passes_total", "Total number of forward passes categorized by CUDA graph.", pyCounter, plus(sglSchedLabels, "mode"), nil)
	m.realtime = r.family("sglang:realtime_tokens_total",
		"Total number of tokens processed (updated on each log interval). mode: prefill_compute, prefill_cache, decode.",
		pyCounter, plus(sglSchedLabels, "mode"), nil)
	m.effective = r.family("sglang:prefill_effective_tokens_total",
		"Effective prefill tokens with retracted-request re-counts excluded, updated on each log interval. mode: device_hit, host_hit, storage_hit, input. Windowed prefix cache hit rate = rate(sum of *_hit) / rate(sum of all modes); per-tier rate uses a single *_hit mode in the numerator.",
		pyCounter, plus(sglSchedLabels, "mode"), nil)
	for _, mode := range []string{"input", "device_hit", "host_hit", "storage_hit"} {
		m.effective.with(plus(m.sched, mode)...) // pre-seeded at 0 by the collector
	}
	m.queueTime = r.family("sglang:queue_time_seconds", "Histogram of queueing time in seconds.", pyHistogram, sglSchedLabels, sglBucketsQueue)
	m.stage = r.family("sglang:per_stage_req_latency_seconds", "The latency of each stage of requests.", pyHistogram, plus(sglSchedLabels, "stage"), sglBucketsStage)

	// Constants, written once at startup (emit_constants). The sim rewrites
	// max_total_num_tokens at every log point instead, so that a scenario
	// that resizes the KV pool (kv-pressure) shows as a server started so.
	c := func(name, help string, v float64) {
		r.family(name, help, pyGauge, sglSchedLabels, nil).with(m.sched...).set(v)
	}
	m.gauges = append(m.gauges, sglGauge{
		f:   r.family("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.", pyGauge, sglSchedLabels, nil),
		val: func(s *sglangStats) float64 { return float64(s.maxTokens) },
	})
	c("sglang:weight_memory_usage_gb", "Memory used by model weights in GB.", 14.99)
	c("sglang:kv_cache_memory_usage_gb", "Memory used by the KV cache pools in GB.", float64(m.cfg.NumGPUBlocks*m.cfg.BlockSize)/8192)
	c("sglang:page_size", "KV cache page size in tokens.", float64(m.cfg.BlockSize))
	c("sglang:num_pages", "Number of KV cache pages.", float64(m.cfg.NumGPUBlocks))
	c("sglang:context_len", "Maximum context length.", float64(m.cfg.MaxModelLen))
	c("sglang:startup_available_gpu_memory_gb", "Available GPU memory in GB at startup.", 78.62)
}

var availableHelp = map[string]string{
	"swa":   "Number of free token slots in the SWA pool (hybrid-SWA only).",
	"mamba": "Number of free state slots in the mamba SSM pool (hybrid-SSM only).",
}

// build04 declares v0.3.6–v0.4's 12 families (fixtures 2–3): the
// tokenizer's counters and histograms, then the scheduler's gauges.
func (m *sglangMetrics) build04(model string) {
	r := m.reg
	labels := []string{"model_name"}
	m.sched, m.tok = []string{model}, []string{model}
	m.promptTotal = r.family("sglang:prompt_tokens_total", "Number of prefill tokens processed.", pyCounter, labels, nil)
	m.genTotal = r.family("sglang:generation_tokens_total", "Number of generation tokens processed.", pyCounter, labels, nil)
	m.ttft = r.family("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", pyHistogram, labels, sglLegacyTTFT)
	m.e2e = r.family("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", pyHistogram, labels, sglLegacyE2E)
	m.tpot = r.family("sglang:time_per_output_token_seconds", "Histogram of time per output token in seconds.", pyHistogram, labels, sglLegacyTPOT)
	m.funcLatency = r.family("sglang:func_latency_seconds", "Function latency in seconds", pyHistogram, []string{"name"}, sglLegacyFunc)
	g := func(name, help string, val func(*sglangStats) float64) {
		m.gauges = append(m.gauges, sglGauge{f: r.family(name, help, pyGauge, labels, nil), val: val})
	}
	g("sglang:num_running_reqs", "The number of running requests", func(s *sglangStats) float64 { return float64(s.running) })
	g("sglang:num_used_tokens", "The number of used tokens", func(s *sglangStats) float64 { return float64(s.usedTokens) })
	g("sglang:gen_throughput", "The generate throughput (token/s)", func(s *sglangStats) float64 { return s.genThroughput })
	g("sglang:num_queue_reqs", "The number of requests in the waiting queue", func(s *sglangStats) float64 { return float64(s.queue) })
	g("sglang:token_usage", "The token usage", func(s *sglangStats) float64 { return s.tokenUsage })
	g("sglang:cache_hit_rate", "The cache hit rate", func(s *sglangStats) float64 { return s.cacheHitRate })
}

// build035 declares v0.3.5's 21 families (fixture 1), all in the scheduler,
// labelled name: the startup constants, the token counters, the log-point
// gauges, then the per-request histograms.
func (m *sglangMetrics) build035(model string) {
	r := m.reg
	labels := []string{"name"}
	m.sched, m.tok = []string{model}, []string{model}
	c := func(name, help string, v float64) { r.family(name, help, pyGauge, labels, nil).with(model).set(v) }
	m.gauges = append(m.gauges, sglGauge{
		f:   r.family("sglang:max_total_num_tokens", "Maximum total number of tokens", pyGauge, labels, nil),
		val: func(s *sglangStats) float64 { return float64(s.maxTokens) },
	})
	c("sglang:max_prefill_tokens", "Maximum prefill tokens", float64(m.cfg.MaxNumBatchedTokens))
	c("sglang:max_running_requests", "Maximum running requests", float64(m.cfg.MaxNumSeqs))
	c("sglang:context_len", "Context length", float64(m.cfg.MaxModelLen))
	m.promptTotal = r.family("sglang:prompt_tokens_total", "Number of prefill tokens processed.", pyCounter, labels, nil)
	m.genTotal = r.family("sglang:generation_tokens_total", "Number of generation tokens processed.", pyCounter, labels, nil)
	g := func(name, help string, val func(*sglangStats) float64) {
		m.gauges = append(m.gauges, sglGauge{f: r.family(name, help, pyGauge, labels, nil), val: val})
	}
	g("sglang:num_requests_running", "Number of requests currently running on GPU", func(s *sglangStats) float64 { return float64(s.running) })
	g("sglang:num_requests_waiting", "Number of requests waiting to be processed.", func(s *sglangStats) float64 { return float64(s.queue) })
	g("sglang:gen_throughput", "Gen token throughput (token/s)", func(s *sglangStats) float64 { return s.genThroughput })
	g("sglang:token_usage", "Total token usage", func(s *sglangStats) float64 { return s.tokenUsage })
	g("sglang:new_seq", "Number of new sequences", func(s *sglangStats) float64 { return float64(s.newSeq) })
	g("sglang:new_token", "Number of new token", func(s *sglangStats) float64 { return float64(s.newToken) })
	g("sglang:cached_token", "Number of cached token", func(s *sglangStats) float64 { return float64(s.cache) })
	// A percentage in this era (fixture 1: 10.61).
	g("sglang:cache_hit_rate", "Cache hit rate", func(s *sglangStats) float64 { return math.Round(s.cacheHitRate*10000) / 100 })
	g("sglang:queue_req", "Number of queued requests", func(s *sglangStats) float64 { return float64(s.queue) })
	m.ttft = r.family("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", pyHistogram, labels, sglLegacyTTFT)
	m.tpot = r.family("sglang:time_per_output_token_seconds", "Histogram of time per output token in seconds.", pyHistogram, labels, sglLegacyTPOT)
	m.reqPrompt = r.family("sglang:request_prompt_tokens", "Number of prefill tokens processed", pyHistogram, labels, sglV035Requests)
	m.reqGen = r.family("sglang:request_generation_tokens", "Number of generation tokens processed.", pyHistogram, labels, sglV035Requests)
	m.e2e = r.family("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", pyHistogram, labels, sglV035Requests)
	m.waitingLatency = r.family("sglang:waiting_request_latency_seconds", "Histogram of request waiting time in seconds", pyHistogram, labels, sglV035Requests)
}

// metricsHandler serves /metrics: SGLang's registry when the sim presents
// SGLang (on the API's port, as --enable-metrics mounts it), else vLLM's.
func (s *Sim) metricsHandler() http.Handler {
	if s.sgl != nil {
		return s.sgl.reg.handler()
	}
	return metricsHandler(s.metrics.reg)
}
