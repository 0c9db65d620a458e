package vllmsim

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// generation is a set of vLLM metric generations, as a bit mask.
type generation uint8

const (
	genCurrent generation = 1 << iota // 2026 and later: kv_cache_usage_perc, inter_token_latency_seconds
	genLegacy                         // late 2025 V1: gpu_cache_usage_perc, gpu_prefix_cache_*, time_per_output_token_seconds
	genBoth    = genCurrent | genLegacy
)

// Bucket boundaries as vLLM's V1 metrics logger declares them.
var (
	bucketsTTFT = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
		1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560}
	bucketsITL = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
		1, 2.5, 5, 7.5, 10, 20, 40, 80}
	bucketsRequest = []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60,
		120, 240, 480, 960, 1920, 7680}
	bucketsIteration = []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}
	bucketsN         = []float64{1, 2, 5, 10, 20}
)

// buckets125 is vLLM's build_1_2_5_buckets: 1, 2, 5, 10, 20, 50, … up to
// limit (the token-count histograms use max_model_len).
func buckets125(limit int) []float64 {
	var out []float64
	for scale := 1; ; scale *= 10 {
		for _, m := range []int{1, 2, 5} {
			if m*scale > limit {
				return out
			}
			out = append(out, float64(m*scale))
		}
	}
}

// metrics is the sim's /metrics: vLLM's families on a private registry,
// named, typed, labelled and bucketed as the generation in use exposes them.
// Metrics of the other generation exist but are not registered.
type metrics struct {
	reg    *prometheus.Registry
	gen    generation
	labels prometheus.Labels

	running, waiting, kvUsage prometheus.Gauge
	waitingByReason           *prometheus.GaugeVec
	preemptions               prometheus.Counter
	promptTokens, genTokens   prometheus.Counter
	promptCached              prometheus.Counter
	promptBySource            *prometheus.CounterVec
	prefixQueries, prefixHits prometheus.Counter
	success                   *prometheus.CounterVec
	flops, readBytes, written prometheus.Counter

	promptHist, genHist, maxGenHist, maxTokensHist, nHist, kvComputedHist prometheus.Histogram
	iterTokens                                                            prometheus.Histogram
	ttft, itl, tpot                                                       prometheus.Histogram
	e2e, queue, inference, prefill, decode                                prometheus.Histogram
}

func newMetrics(model string, legacy bool, eng EngineConfig) *metrics {
	m := &metrics{
		reg:    prometheus.NewRegistry(),
		gen:    genCurrent,
		labels: prometheus.Labels{"model_name": model, "engine": "0"},
	}
	if legacy {
		m.gen = genLegacy
	}
	m.reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	pick := func(current, old string) string {
		if legacy {
			return old
		}
		return current
	}
	m.gauges(pick)
	m.counters(pick)
	m.histograms(pick, eng)
	m.cacheConfigInfo(eng)
	return m
}

func (m *metrics) register(in generation, c prometheus.Collector) {
	if in&m.gen != 0 {
		m.reg.MustRegister(c)
	}
}

func (m *metrics) gauge(in generation, name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: m.labels})
	m.register(in, g)
	return g
}

func (m *metrics) counter(in generation, name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: m.labels})
	m.register(in, c)
	return c
}

func (m *metrics) histogram(in generation, name, help string, buckets []float64) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, ConstLabels: m.labels, Buckets: buckets})
	m.register(in, h)
	return h
}

func (m *metrics) gauges(pick func(string, string) string) {
	m.running = m.gauge(genBoth, "vllm:num_requests_running", "Number of requests in model execution batches.")
	m.waiting = m.gauge(genBoth, "vllm:num_requests_waiting", "Number of requests waiting to be processed.")
	m.waitingByReason = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "vllm:num_requests_waiting_by_reason", ConstLabels: m.labels,
		Help: "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked status). Sum of all reasons equals vllm:num_requests_waiting.",
	}, []string{"reason"})
	m.waitingByReason.WithLabelValues("capacity").Set(0)
	m.waitingByReason.WithLabelValues("deferred").Set(0)
	m.register(genCurrent, m.waitingByReason)
	sleep := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "vllm:engine_sleep_state", ConstLabels: m.labels,
		Help: "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
	}, []string{"sleep_state"})
	sleep.WithLabelValues("awake").Set(1)
	sleep.WithLabelValues("weights_offloaded").Set(0)
	sleep.WithLabelValues("discard_all").Set(0)
	m.register(genCurrent, sleep)
	m.kvUsage = m.gauge(genBoth, pick("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
		pick("KV-cache usage. 1 means 100 percent usage.", "GPU KV-cache usage. 1 means 100 percent usage."))
}

func (m *metrics) counters(pick func(string, string) string) {
	m.flops = m.counter(genCurrent, "vllm:estimated_flops_per_gpu_total", "Estimated number of floating point operations per GPU (for Model Flops Utilization calculations).")
	m.readBytes = m.counter(genCurrent, "vllm:estimated_read_bytes_per_gpu_total", "Estimated number of bytes read from memory per GPU (for Model Flops Utilization calculations).")
	m.written = m.counter(genCurrent, "vllm:estimated_write_bytes_per_gpu_total", "Estimated number of bytes written to memory per GPU (for Model Flops Utilization calculations).")
	m.prefixQueries = m.counter(genBoth, pick("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
		"Prefix cache queries, in terms of number of queried tokens.")
	m.prefixHits = m.counter(genBoth, pick("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
		"Prefix cache hits, in terms of number of cached tokens.")
	m.counter(genCurrent, "vllm:external_prefix_cache_queries_total", "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens.")
	m.counter(genCurrent, "vllm:external_prefix_cache_hits_total", "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens.")
	m.counter(genCurrent, "vllm:mm_cache_queries_total", "Multi-modal cache queries, in terms of number of queried items.")
	m.counter(genCurrent, "vllm:mm_cache_hits_total", "Multi-modal cache hits, in terms of number of cached items.")
	m.preemptions = m.counter(genBoth, "vllm:num_preemptions_total", "Cumulative number of preemption from the engine.")
	m.promptTokens = m.counter(genBoth, "vllm:prompt_tokens_total", "Number of prefill tokens processed.")
	m.promptBySource = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vllm:prompt_tokens_by_source_total", Help: "Number of prompt tokens by source.", ConstLabels: m.labels,
	}, []string{"source"})
	for _, s := range []string{"local_compute", "local_cache_hit", "external_kv_transfer"} {
		m.promptBySource.WithLabelValues(s).Add(0)
	}
	m.register(genCurrent, m.promptBySource)
	m.promptCached = m.counter(genCurrent, "vllm:prompt_tokens_cached_total", "Number of cached prompt tokens (local + external).")
	m.genTokens = m.counter(genBoth, "vllm:generation_tokens_total", "Number of generation tokens processed.")
	m.success = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vllm:request_success_total", Help: "Count of successfully processed requests.", ConstLabels: m.labels,
	}, []string{"finished_reason"})
	for _, r := range []string{"stop", "length", "abort", "error", "repetition"} {
		m.success.WithLabelValues(r).Add(0)
	}
	m.register(genBoth, m.success)
}

func (m *metrics) histograms(pick func(string, string) string, eng EngineConfig) {
	tokens := buckets125(eng.MaxModelLen)
	m.promptHist = m.histogram(genBoth, "vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokens)
	m.genHist = m.histogram(genBoth, "vllm:request_generation_tokens", "Number of generation tokens processed.", tokens)
	m.iterTokens = m.histogram(genBoth, "vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", bucketsIteration)
	m.maxGenHist = m.histogram(genBoth, "vllm:request_max_num_generation_tokens", "Histogram of maximum number of requested generation tokens.", tokens)
	m.nHist = m.histogram(genBoth, "vllm:request_params_n", "Histogram of the n request parameter.", bucketsN)
	m.maxTokensHist = m.histogram(genBoth, "vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", tokens)
	m.ttft = m.histogram(genBoth, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", bucketsTTFT)
	m.itl = m.histogram(genBoth, pick("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
		pick("Histogram of inter-token latency in seconds.", "Histogram of time per output token in seconds."), bucketsITL)
	m.tpot = m.histogram(genCurrent, "vllm:request_time_per_output_token_seconds", "Histogram of time_per_output_token_seconds per request.", bucketsITL)
	m.e2e = m.histogram(genBoth, "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", bucketsRequest)
	m.queue = m.histogram(genBoth, "vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", bucketsRequest)
	m.inference = m.histogram(genBoth, "vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", bucketsRequest)
	m.prefill = m.histogram(genBoth, "vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", bucketsRequest)
	m.decode = m.histogram(genBoth, "vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", bucketsRequest)
	m.kvComputedHist = m.histogram(genCurrent, "vllm:request_prefill_kv_computed_tokens", "Histogram of new KV tokens computed during prefill (excluding cached tokens).", tokens)
}

// cacheConfigInfo is vLLM's info gauge of the KV cache configuration; its
// label set follows the newest recorded scrape.
func (m *metrics) cacheConfigInfo(eng EngineConfig) {
	tokens := eng.NumGPUBlocks * eng.BlockSize
	labels := prometheus.Labels{
		"_block_size_resolved": "True", "block_size": strconv.Itoa(eng.BlockSize), "cache_dtype": "auto",
		"enable_prefix_caching": pyBool(!eng.NoPrefixCaching), "engine": "0", "gpu_memory_utilization": "0.9",
		"is_attention_free": "False", "kv_cache_dtype_skip_layers": "[]", "kv_cache_layout": "None",
		"kv_cache_max_concurrency": strconv.FormatFloat(float64(tokens)/float64(eng.MaxModelLen), 'f', -1, 64),
		"kv_cache_memory_bytes":    "None", "kv_cache_size_tokens": strconv.Itoa(tokens),
		"kv_offloading_backend": "native", "kv_offloading_size": "None", "kv_sharing_fast_prefill": "False",
		"mamba_block_size": "None", "mamba_cache_dtype": "auto", "mamba_cache_mode": "none",
		"mamba_page_size_padded": "None", "mamba_ssm_cache_dtype": "auto", "num_cpu_blocks": "None",
		"num_gpu_blocks": strconv.Itoa(eng.NumGPUBlocks), "num_gpu_blocks_override": "None",
		"prefix_cache_retention_interval": "0", "prefix_caching_hash_algo": "sha256", "prefix_match_unit": "None",
		"replayssm_buffer_len": "16", "skip_page_size_padded": "None", "sliding_window": "None",
		"use_kda_recoverssm": "False", "use_replayssm": "False", "user_specified_block_size": "False",
		"user_specified_mamba_block_size": "False",
	}
	if m.gen == genLegacy {
		labels = prometheus.Labels{
			"block_size": strconv.Itoa(eng.BlockSize), "cache_dtype": "auto", "calculate_kv_scales": "False",
			"enable_prefix_caching": pyBool(!eng.NoPrefixCaching), "engine": "0", "gpu_memory_utilization": "0.9",
			"is_attention_free": "False", "num_cpu_blocks": "None", "num_gpu_blocks": strconv.Itoa(eng.NumGPUBlocks),
			"num_gpu_blocks_override": "None", "prefix_caching_hash_algo": "builtin", "sliding_window": "None",
			"swap_space_bytes": "4294967296",
		}
	}
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "vllm:cache_config_info", Help: "Information of the LLMEngine CacheConfig", ConstLabels: labels,
	})
	info.Set(1)
	m.reg.MustRegister(info)
}

func pyBool(b bool) string {
	if b {
		return "True"
	}
	return "False"
}
