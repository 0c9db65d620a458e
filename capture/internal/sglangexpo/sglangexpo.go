// Package sglangexpo is SGLang's metric dialect: its family names across its
// eras, how an exposition tells its era, and which canonical signals an era
// has no series for. The scrape step reads SGLang's /metrics with
// capture/internal/exposition's engine-neutral parser and these names; the
// mapping onto the canonical signals is SGLANG.md §4 (team notes), cited
// below by section.
package sglangexpo

import (
	"strings"

	dto "github.com/prometheus/client_model/go"
)

// Prefix starts every SGLang family name; vLLM's start "vllm:".
const Prefix = "sglang:"

// Metric names one quantity, newest name first, as exposition.Metric does (a
// []string, so it converts to one without a copy).
type Metric = []string

// The families the scrape step reads, newest name first (SGLANG.md §2–§4).
var (
	// Queue is the waiting queue (v0.3.5: num_requests_waiting).
	Queue = Metric{"sglang:num_queue_reqs", "sglang:num_requests_waiting"}
	// Running is the batch (v0.3.5: num_requests_running).
	Running = Metric{"sglang:num_running_reqs", "sglang:num_requests_running"}
	// TokenUsage is KV fullness, 0..1: the max over the full/SWA/mamba pools
	// in 2026 builds; evictable radix-cache tokens count as free (§4).
	TokenUsage = Metric{"sglang:token_usage"}
	// Retracted counts retractions, SGLang's preemptions (late 2025+, §4).
	Retracted = Metric{"sglang:num_retracted_requests_total"}
	// PromptTokens and GenerationTokens are counted when a request
	// finishes, not as it is prefilled (§4).
	PromptTokens     = Metric{"sglang:prompt_tokens_total"}
	GenerationTokens = Metric{"sglang:generation_tokens_total"}
	// RealtimeTokens counts tokens per forward pass, by mode
	// (prefill_compute, prefill_cache, decode): late 2025+ (§2).
	RealtimeTokens = Metric{"sglang:realtime_tokens_total"}
	// CachedTokens is the cached part of the prompt tokens; with
	// cache_source in 2026 builds ("total" is the sum).
	CachedTokens = Metric{"sglang:cached_tokens_total"}
	// Requests counts every finished request, aborted ones included (§3).
	Requests = Metric{"sglang:num_requests_total"}
	// Aborted counts client aborts; it has no reason label (§4, §7).
	Aborted = Metric{"sglang:num_aborted_requests_total"}
	// TTFT: non-streamed requests are flushed every 50 tokens, so their TTFT
	// is about their e2e; 2026 builds label is_streaming (§4).
	TTFT = Metric{"sglang:time_to_first_token_seconds"}
	// ITL is token-weighted: each chunk adds its interval to _sum and its
	// token count to the bucket of interval/tokens (§4).
	ITL = Metric{"sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"}
	// E2E is tokenizer receipt to finish.
	E2E = Metric{"sglang:e2e_request_latency_seconds"}
	// QueueTime is measured in the scheduler (late 2025+; v0.3.5 had
	// waiting_request_latency_seconds; 2025 builds only a gauge, §4).
	QueueTime = Metric{"sglang:queue_time_seconds", "sglang:waiting_request_latency_seconds"}
	// StageLatency is per_stage_req_latency_seconds{stage}; prefill time is
	// its stage="prefill_forward" (late 2025+, §3, §4).
	StageLatency = Metric{"sglang:per_stage_req_latency_seconds"}
	// PromptHist and GenerationHist are per-request token counts.
	PromptHist     = Metric{"sglang:prompt_tokens_histogram", "sglang:request_prompt_tokens"}
	GenerationHist = Metric{"sglang:generation_tokens_histogram", "sglang:request_generation_tokens"}
)

// StagePrefill is the per_stage_req_latency_seconds stage of a prefill forward.
const StagePrefill = "prefill_forward"

// Eras, oldest first (SGLANG.md §2). An era is what the exposition shows, not
// a version number: series appear only once written (§1), so a fresh server
// may read one era older than it is until its first requests finish.
const (
	EraUnknown  = "unknown"
	EraV035     = "v0.3.5"      // `name` label, num_requests_waiting (PR #1853)
	EraV036     = "v0.3.6-v0.4" // model_name, time_per_output_token_seconds (PR #1981)
	Era2025     = "2025"        // engine_type label, inter_token_latency_seconds
	EraLate2025 = "late-2025"   // queue_time_seconds, num_retracted_requests_total
	Era2026     = "2026"        // priority label, full_token_usage, kv_used_tokens
)

// eraRank orders the eras; unknown ranks below all.
var eraRank = map[string]int{EraUnknown: 0, EraV035: 1, EraV036: 2, Era2025: 3, EraLate2025: 4, Era2026: 5}

// Label is the era as a sentence says it: "SGLang v0.3.6–v0.4".
func Label(era string) string {
	switch era {
	case EraV036:
		return "SGLang v0.3.6–v0.4"
	case Era2025:
		return "SGLang 2025"
	case EraLate2025:
		return "SGLang late 2025"
	case Era2026:
		return "SGLang 2026"
	case EraUnknown:
		return "SGLang (era unknown)"
	}
	return "SGLang " + era
}

// EraOf tells an exposition's era from its marker families and labels
// (SGLANG.md §2), newest markers first.
func EraOf(fams map[string]*dto.MetricFamily) string {
	has := func(name string) bool { _, ok := fams[name]; return ok }
	switch {
	case hasLabel(fams, "priority") || has("sglang:full_token_usage") || has("sglang:kv_used_tokens"):
		return Era2026
	case isHistogram(fams["sglang:queue_time_seconds"]) || has(Retracted[0]) || has(RealtimeTokens[0]) || has(StageLatency[0]):
		return EraLate2025
	case hasLabel(fams, "engine_type") || has(ITL[0]):
		return Era2025
	case hasLabel(fams, "name") && has(Queue[1]):
		return EraV035
	case hasLabel(fams, "model_name") && has(ITL[1]):
		return EraV036
	case has(Queue[0]) || has(Running[0]):
		return EraV036 // scheduler gauges of a server no request has finished on yet
	}
	return EraUnknown
}

// hasLabel says whether any sglang: series carries the label.
func hasLabel(fams map[string]*dto.MetricFamily, label string) bool {
	for name, f := range fams {
		if !strings.HasPrefix(name, Prefix) {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label {
					return true
				}
			}
		}
	}
	return false
}

func isHistogram(f *dto.MetricFamily) bool {
	return f != nil && f.GetType() == dto.MetricType_HISTOGRAM
}
