package sglangexpo

import "github.com/autocapture/autocapture/vocab"

// exposedIn lists, for each canonical signal SGLang lacks in some era, the
// eras that have a series for it (SGLANG.md §2, §4). A signal not listed here
// is exposed by every era (queue, batch, KV, TTFT, ITL, e2e, token counts).
var exposedIn = map[string][]string{
	// num_retracted_requests_total: late 2025. Older builds have only the
	// per-log-window gauge num_retracted_reqs (reset at each log point, a
	// `pid` label) or total_retracted_reqs, not a counter to rate (§4).
	vocab.SigPreemptionsRate: {EraLate2025, Era2026},
	// queue_time_seconds (late 2025); v0.3.5's waiting_request_latency_seconds.
	// 2025 builds have only the avg_request_queue_latency gauge (§2).
	vocab.SigQueueTimeMean: {EraV035, EraLate2025, Era2026},
	vocab.SigQueueTimeN:    {EraV035, EraLate2025, Era2026},
	// per_stage_req_latency_seconds{stage="prefill_forward"} (§4).
	vocab.SigPrefillMean: {EraLate2025, Era2026},
	// No per-request decode histogram in any era (§4; spans carry
	// gen_ai.latency.time_in_model_decode, §6).
	vocab.SigDecodeMean: nil,
	// realtime_tokens_total{mode=~"prefill_.*"}, counted per forward pass;
	// prompt_tokens_total counts at the finish (§4).
	vocab.SigPromptTokensNow: {EraLate2025, Era2026},
	// num_aborted_requests_total: in ai-dynamo's 2025-10 list (§2), so
	// some 2025 builds have it (MaybeIn).
	vocab.SigAbortRatio: {Era2025, EraLate2025, Era2026},
	// realtime_tokens_total (late 2025) or cached_tokens_total (some 2025
	// builds); never the cache_hit_rate gauge (§4).
	vocab.SigPrefixHitRatio: {Era2025, EraLate2025, Era2026},
}

// maybeIn are the eras in which some builds have a signal's series and some
// do not: absent there, it is reported as not exposed by "this build".
var maybeIn = map[string]string{
	vocab.SigAbortRatio:     Era2025,
	vocab.SigPrefixHitRatio: Era2025,
}

// Gaps lists the canonical signals SGLang reports nothing for in an era.
var Gaps = []string{vocab.SigPreemptionsRate, vocab.SigQueueTimeMean, vocab.SigQueueTimeN, vocab.SigPrefillMean,
	vocab.SigDecodeMean, vocab.SigPromptTokensNow, vocab.SigAbortRatio, vocab.SigPrefixHitRatio}

// NotExposed says why signal has no SGLang series in era: "not exposed by
// SGLang v0.3.6–v0.4", or "" when the era has one (or the era is unknown, or
// the era has it in some builds only: see NotExposedByBuild).
func NotExposed(era, signal string) string {
	eras, listed := exposedIn[signal]
	if !listed || era == EraUnknown {
		return ""
	}
	for _, e := range eras {
		if e == era {
			return ""
		}
	}
	return "not exposed by " + Label(era)
}

// NotExposedByBuild says why signal is absent from a scrape of an era in
// which only some builds have it ("" when the era has it always or never).
func NotExposedByBuild(era, signal string) string {
	if maybeIn[signal] != era {
		return ""
	}
	return "not exposed by this " + Label(era) + " build"
}

// Extra is a figure SGLang gives beyond the canonical signals, for evidence:
// a gauge (combined by Max or by sum) or a counter (as a rate over the gap).
type Extra struct {
	Key     string
	Metric  Metric
	Counter bool
	Max     bool
}

// Extras are SGLang's figures beyond the canonical signals (SGLANG.md §3),
// reported as the step's FindingEngineExtras where the scrape has them.
var Extras = []Extra{
	// The last prefill batch's hit ratio; decode log points write 0 (§4).
	// A percent in v0.3.5, reported here as a ratio.
	{Key: "cache_hit_rate_last_batch", Metric: Metric{"sglang:cache_hit_rate"}, Max: true},
	{Key: "spec_accept_rate", Metric: Metric{"sglang:spec_accept_rate"}, Max: true},
	{Key: "spec_accept_length", Metric: Metric{"sglang:spec_accept_length"}, Max: true},
	{Key: "gen_throughput", Metric: Metric{"sglang:gen_throughput"}},
	{Key: "num_used_tokens", Metric: Metric{"sglang:num_used_tokens"}},
	{Key: "grammar_queue", Metric: Metric{"sglang:num_grammar_queue_reqs"}},
	{Key: "paused", Metric: Metric{"sglang:num_paused_reqs"}},
	{Key: "retracted_last_log_window", Metric: Metric{"sglang:num_retracted_reqs"}},
	{Key: "retracted_total_gauge", Metric: Metric{"sglang:total_retracted_reqs"}},
	{Key: "avg_request_queue_latency_s", Metric: Metric{"sglang:avg_request_queue_latency"}, Max: true},
	// PD disaggregation queues (§3; prealloc was renamed bootstrap in 2026).
	{Key: "pd_prefill_bootstrap_queue", Metric: Metric{"sglang:num_prefill_bootstrap_queue_reqs", "sglang:num_prefill_prealloc_queue_reqs"}},
	{Key: "pd_prefill_inflight_queue", Metric: Metric{"sglang:num_prefill_inflight_queue_reqs"}},
	{Key: "pd_decode_prealloc_queue", Metric: Metric{"sglang:num_decode_prealloc_queue_reqs"}},
	{Key: "pd_decode_transfer_queue", Metric: Metric{"sglang:num_decode_transfer_queue_reqs"}},
	{Key: "retracted_input_tokens_per_s", Metric: Metric{"sglang:num_retracted_input_tokens_total"}, Counter: true},
	{Key: "retracted_output_tokens_per_s", Metric: Metric{"sglang:num_retracted_output_tokens_total"}, Counter: true},
	{Key: "pd_bootstrap_failed_per_s", Metric: Metric{"sglang:num_bootstrap_failed_reqs_total"}, Counter: true},
	{Key: "pd_transfer_failed_per_s", Metric: Metric{"sglang:num_transfer_failed_reqs_total"}, Counter: true},
}

// Notes are the sentences on how an era's figures differ from vLLM's, for
// FindingEngineNotes.
func Notes(era string) []string {
	out := []string{"ITL is token-weighted (seconds per token over each streamed chunk), comparable to vLLM's per-token ITL"}
	if eraRank[era] < eraRank[Era2026] {
		out = append(out, "TTFT includes non-streamed requests, whose first token is flushed only at 50 tokens or the finish (≈ e2e): no is_streaming label before 2026")
	}
	if era == EraV035 {
		out = append(out, "cache_hit_rate is a percent in v0.3.5 (reported here as a ratio)")
	}
	return out
}

// Before says whether era a is older than era b (unknown is oldest).
func Before(a, b string) bool { return eraRank[a] < eraRank[b] }
