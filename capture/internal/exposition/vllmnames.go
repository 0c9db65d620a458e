package exposition

import (
	"github.com/autocapture/autocapture/vocab"
)

// vLLM's metric names, both generations. vLLM renamed a few series in late 2025
// and early 2026 (VLLM.md); an instance of either generation must triage the
// same way, so every quantity lists its current name first and the older one
// after it, and readers take the first name the exposition has.
//
//	quantity                 current                                 older (removed)
//	KV pool fullness         vllm:kv_cache_usage_perc                vllm:gpu_cache_usage_perc
//	inter-token latency      vllm:inter_token_latency_seconds        vllm:time_per_output_token_seconds
//	prefix cache             vllm:prefix_cache_{queries,hits}_total  vllm:gpu_prefix_cache_{queries,hits}_total
type Metric []string

// The series the scrape step reads. Counters carry _total, as exposed.
var (
	vmRunning     = Metric{"vllm:num_requests_running"}
	VMWaiting     = Metric{"vllm:num_requests_waiting"}
	VMKVUsage     = Metric{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"}
	VMPreemptions = Metric{"vllm:num_preemptions_total"}
	VMPrefixQuery = Metric{"vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"}
	VMPrefixHits  = Metric{"vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"}
	VMFinished    = Metric{"vllm:request_success_total"}
	VMTTFT        = Metric{"vllm:time_to_first_token_seconds"}
	VMITL         = Metric{"vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"}
	VMQueueTime   = Metric{"vllm:request_queue_time_seconds"}
	vmPrefillTime = Metric{"vllm:request_prefill_time_seconds"}
	vmDecodeTime  = Metric{"vllm:request_decode_time_seconds"}
	vmE2E         = Metric{"vllm:e2e_request_latency_seconds"}
	vmPromptToks  = Metric{"vllm:request_prompt_tokens"}
	vmOutputToks  = Metric{"vllm:request_generation_tokens"}
	// vmPromptTokensTotal counts prompt tokens as they are prefilled.
	VMPromptTokensTotal = Metric{"vllm:prompt_tokens_total"}
)

// FinishedReasonAbort is request_success_total's finished_reason for a request
// the client gave up on.
const FinishedReasonAbort = "abort"

// Metric generations, as the scrape step reports them.
const (
	GenerationCurrent = "current" // kv_cache_usage_perc, inter_token_latency_seconds
	GenerationLegacy  = "legacy"  // gpu_cache_usage_perc, time_per_output_token_seconds
	generationUnknown = "unknown" // neither marker series present
)

// GaugeSignals are the signals read from one gauge, with how label sets (one per
// engine of a data-parallel server) combine: counts add up, KV fullness takes the
// fullest pool, since one full pool already preempts.
var GaugeSignals = []struct {
	Signal string
	Metric Metric
	Agg    Aggregation
}{
	{vocab.SigQueueDepth, VMWaiting, AggSum},
	{vocab.SigRunning, vmRunning, AggMax}, // batch width is per engine (max-num-seqs applies to each)
	{vocab.SigKVUsage, VMKVUsage, AggMax},
}

// HistogramSignals are the signals read from a histogram over the scrape gap:
// quantiles where the alerts use quantiles, means for the stage split.
var HistogramSignals = []struct {
	Metric Metric
	P99    string
	P50    string
	Mean   string
}{
	{VMTTFT, vocab.SigTTFTP99, vocab.SigTTFTP50, ""},
	{VMITL, vocab.SigITLP99, vocab.SigITLP50, ""},
	{VMQueueTime, "", "", vocab.SigQueueTimeMean},
	{vmPrefillTime, "", "", vocab.SigPrefillMean},
	{vmDecodeTime, "", "", vocab.SigDecodeMean},
	{vmE2E, "", "", vocab.SigE2EMean},
	{vmPromptToks, "", "", vocab.SigPromptTokens},
	{vmOutputToks, "", "", vocab.SigOutputTokens},
}

// GenerationOf says which metric generation an exposition is.
func GenerationOf(e Exposition) string {
	switch {
	case e.has(VMKVUsage[0]) || e.has(VMITL[0]):
		return GenerationCurrent
	case e.has(VMKVUsage[1]) || e.has(VMITL[1]):
		return GenerationLegacy
	}
	return generationUnknown
}
