package capture

// Signals are the canonical numbers a vLLM operator reads, whatever produced them
// (PromQL over the window, or two local scrapes of the instance). Triage reads only
// these names, so both metric generations and both sources meet here.
type Signals map[string]float64

// Canonical signal names. Latencies are seconds; ratios are 0..1; rates per second.
const (
	SigQueueDepth      = "queue_depth"       // vllm:num_requests_waiting
	SigRunning         = "running"           // vllm:num_requests_running (batch width)
	SigKVUsage         = "kv_usage"          // vllm:kv_cache_usage_perc | gpu_cache_usage_perc
	SigPreemptionsRate = "preemptions_per_s" // rate(vllm:num_preemptions_total)
	SigTTFTP99         = "ttft_p99"
	SigTTFTP50         = "ttft_p50"
	SigITLP99          = "itl_p99" // inter_token_latency | time_per_output_token
	SigITLP50          = "itl_p50"
	SigQueueTimeMean   = "queue_time_mean"
	SigPrefillMean     = "prefill_time_mean"
	SigDecodeMean      = "decode_time_mean"
	SigE2EMean         = "e2e_mean"
	SigPromptTokens    = "prompt_tokens_mean" // per finished request
	SigOutputTokens    = "output_tokens_mean"
	SigAbortRatio      = "abort_ratio" // aborted ÷ all finished
	SigRequestRate     = "request_rate"
	SigPrefixHitRatio  = "prefix_hit_ratio"

	// Baselines: the same quantity before the alert (PromQL `offset`), for
	// "up versus before" evidence. Triage works without them.
	SigTTFTP99Baseline     = "ttft_p99_baseline"
	SigITLP99Baseline      = "itl_p99_baseline"
	SigPrefillMeanBaseline = "prefill_time_mean_baseline"
	SigPromptTokensBase    = "prompt_tokens_mean_baseline"
)

// SignalNames lists every canonical signal name; a playbook's `signal:` must be one.
var SignalNames = []string{SigQueueDepth, SigRunning, SigKVUsage, SigPreemptionsRate,
	SigTTFTP99, SigTTFTP50, SigITLP99, SigITLP50, SigQueueTimeMean, SigPrefillMean,
	SigDecodeMean, SigE2EMean, SigPromptTokens, SigOutputTokens, SigAbortRatio,
	SigRequestRate, SigPrefixHitRatio, SigTTFTP99Baseline, SigITLP99Baseline,
	SigPrefillMeanBaseline, SigPromptTokensBase}

// KnownSignal says whether name is a canonical signal.
func KnownSignal(name string) bool {
	for _, n := range SignalNames {
		if n == name {
			return true
		}
	}
	return false
}

// Merge copies o's signals into s where s has none, so an earlier, better source wins.
func (s Signals) Merge(o Signals) {
	for k, v := range o {
		if _, ok := s[k]; !ok {
			s[k] = v
		}
	}
}
