package capture

import "github.com/autocapture/autocapture/vocab"

// vLLM's metric names, both generations. vLLM renamed a few series in late 2025
// and early 2026 (VLLM.md); an instance of either generation must triage the
// same way, so every quantity lists its current name first and the older one
// after it, and readers take the first name the exposition has.
//
//	quantity                 current                                 older (removed)
//	KV pool fullness         vllm:kv_cache_usage_perc                vllm:gpu_cache_usage_perc
//	inter-token latency      vllm:inter_token_latency_seconds        vllm:time_per_output_token_seconds
//	prefix cache             vllm:prefix_cache_{queries,hits}_total  vllm:gpu_prefix_cache_{queries,hits}_total
type vllmMetric []string

// The series the scrape step reads. Counters carry _total, as exposed.
var (
	vmRunning     = vllmMetric{"vllm:num_requests_running"}
	vmWaiting     = vllmMetric{"vllm:num_requests_waiting"}
	vmKVUsage     = vllmMetric{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"}
	vmPreemptions = vllmMetric{"vllm:num_preemptions_total"}
	vmPrefixQuery = vllmMetric{"vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"}
	vmPrefixHits  = vllmMetric{"vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"}
	vmFinished    = vllmMetric{"vllm:request_success_total"}
	vmTTFT        = vllmMetric{"vllm:time_to_first_token_seconds"}
	vmITL         = vllmMetric{"vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"}
	vmQueueTime   = vllmMetric{"vllm:request_queue_time_seconds"}
	vmPrefillTime = vllmMetric{"vllm:request_prefill_time_seconds"}
	vmDecodeTime  = vllmMetric{"vllm:request_decode_time_seconds"}
	vmE2E         = vllmMetric{"vllm:e2e_request_latency_seconds"}
	vmPromptToks  = vllmMetric{"vllm:request_prompt_tokens"}
	vmOutputToks  = vllmMetric{"vllm:request_generation_tokens"}
	// vmPromptTokensTotal counts prompt tokens as they are prefilled.
	vmPromptTokensTotal = vllmMetric{"vllm:prompt_tokens_total"}
)

// finishedReasonAbort is request_success_total's finished_reason for a request
// the client gave up on.
const finishedReasonAbort = "abort"

// Metric generations, as the scrape step reports them.
const (
	generationCurrent = "current" // kv_cache_usage_perc, inter_token_latency_seconds
	generationLegacy  = "legacy"  // gpu_cache_usage_perc, time_per_output_token_seconds
	generationUnknown = "unknown" // neither marker series present
)

// gaugeSignals are the signals read from one gauge, with how label sets (one per
// engine of a data-parallel server) combine: counts add up, KV fullness takes the
// fullest pool, since one full pool already preempts.
var gaugeSignals = []struct {
	signal string
	metric vllmMetric
	agg    aggregation
}{
	{vocab.SigQueueDepth, vmWaiting, aggSum},
	{vocab.SigRunning, vmRunning, aggMax}, // batch width is per engine (max-num-seqs applies to each)
	{vocab.SigKVUsage, vmKVUsage, aggMax},
}

// histogramSignals are the signals read from a histogram over the scrape gap:
// quantiles where the alerts use quantiles, means for the stage split.
var histogramSignals = []struct {
	metric vllmMetric
	p99    string
	p50    string
	mean   string
}{
	{vmTTFT, vocab.SigTTFTP99, vocab.SigTTFTP50, ""},
	{vmITL, vocab.SigITLP99, vocab.SigITLP50, ""},
	{vmQueueTime, "", "", vocab.SigQueueTimeMean},
	{vmPrefillTime, "", "", vocab.SigPrefillMean},
	{vmDecodeTime, "", "", vocab.SigDecodeMean},
	{vmE2E, "", "", vocab.SigE2EMean},
	{vmPromptToks, "", "", vocab.SigPromptTokens},
	{vmOutputToks, "", "", vocab.SigOutputTokens},
}

// generationOf says which metric generation an exposition is.
func generationOf(e exposition) string {
	switch {
	case e.has(vmKVUsage[0]) || e.has(vmITL[0]):
		return generationCurrent
	case e.has(vmKVUsage[1]) || e.has(vmITL[1]):
		return generationLegacy
	}
	return generationUnknown
}
