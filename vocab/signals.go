package vocab

import "strings"

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
	SigPromptTokensNow = "prompt_tokens_now"  // per request admitted: prompt tokens prefilled ÷ first tokens, counted as they happen
	SigOutputTokens    = "output_tokens_mean"
	SigAbortRatio      = "abort_ratio" // aborted ÷ all finished
	SigRequestRate     = "request_rate"
	SigPrefixHitRatio  = "prefix_hit_ratio"

	// Queueing as it is now, not as finished requests remember it (vLLM's
	// lifecycle histograms observe a request only when it finishes, so at the
	// onset of a queue the requests stuck in it are not in them yet).
	SigQueueGrowth = "queue_growth_per_s" // change of num_requests_waiting per second over the window
	SigAdmitRate   = "admit_rate"         // requests reaching their first token per second: rate(time_to_first_token_seconds_count)
	SigQueueOldest = "queue_oldest_wait"  // age (s) of the oldest waiting request; vLLM exposes none, a gateway or exporter may
	SigQueueWait   = "queue_wait"         // s a request entering the queue now waits: oldest wait, else waiting ÷ admitted rate (Little's law)
	SigQueueTimeN  = "queue_time_count"   // requests the queue-time histogram covers in the window (its count's increase)
	// SigArrivalRate is requests arriving per second: admitted (first
	// tokens) plus the queue's growth. Finishes (request_rate) and
	// admissions cap at an instance's capacity; arrivals do not, so an
	// instance sent 3× its share reads 3×, not its capacity (capture/triage/triagescope.go).
	SigArrivalRate = "arrival_rate"

	// Baselines: the same quantity over the instance's own past (a query
	// marked `baseline`, capture/prometheus/baseline.go, gives <signal>_baseline
	// and <signal>_baseline_1d for any signal; these are the common ones).
	// Triage judges the workload's change by them, and works without them.
	SigTTFTP99Baseline     = "ttft_p99_baseline"
	SigITLP99Baseline      = "itl_p99_baseline"
	SigPrefillMeanBaseline = "prefill_time_mean_baseline"
	SigPromptTokensBase    = "prompt_tokens_mean_baseline"
)

// SignalNames lists every canonical signal name; a playbook's `signal:` must be one.
var SignalNames = []string{SigQueueDepth, SigRunning, SigKVUsage, SigPreemptionsRate,
	SigTTFTP99, SigTTFTP50, SigITLP99, SigITLP50, SigQueueTimeMean, SigPrefillMean,
	SigDecodeMean, SigE2EMean, SigPromptTokens, SigPromptTokensNow, SigOutputTokens, SigAbortRatio,
	SigRequestRate, SigPrefixHitRatio, SigQueueGrowth, SigAdmitRate, SigQueueOldest,
	SigQueueWait, SigQueueTimeN, SigArrivalRate, SigTTFTP99Baseline, SigITLP99Baseline,
	SigPrefillMeanBaseline, SigPromptTokensBase}

// KnownSignal says whether name is a canonical signal, or the baseline of one.
func KnownSignal(name string) bool {
	base := strings.TrimSuffix(strings.TrimSuffix(name, SuffixBaselineDay), SuffixBaseline)
	for _, n := range SignalNames {
		if n == name || n == base {
			return true
		}
	}
	return false
}

// IsBaseline says whether name is a baseline signal (SuffixBaseline or
// SuffixBaselineDay).
func IsBaseline(name string) bool {
	return strings.HasSuffix(name, SuffixBaseline) || strings.HasSuffix(name, SuffixBaselineDay)
}

// Merge copies o's signals into s where s has none, so an earlier, better source wins.
func (s Signals) Merge(o Signals) {
	for k, v := range o {
		if _, ok := s[k]; !ok {
			s[k] = v
		}
	}
}

// Origin is where a signal triage read came from and how old it is: the step,
// its kind of source, the span of time the value summarises and the age of
// its newest data when triage read it. Steps describe their signals in their
// findings (FindingSignalWindows, FindingSignalsAt), so an origin survives the
// run's records; a mock or an older record without them has Window and Age
// unknown (negative).
type Origin struct {
	Step   string  `json:"step"`
	Source string  `json:"source,omitempty"` // promql | scrape; empty when the step did not say
	Window float64 `json:"window_s"`         // seconds the value summarises; 0: one reading; < 0: unknown
	Age    float64 `json:"age_s"`            // seconds from its newest data to the verdict; < 0: unknown
}

// Findings keys with which a metrics step describes its signals.
const (
	// FindingSignalWindows maps a signal to the seconds of data it summarises
	// (0 for a reading at one moment).
	FindingSignalWindows = "signal_windows"
	// FindingSignalLags maps a signal to the seconds its data ends before
	// FindingSignalsAt (a PromQL `offset` or `@`); absent means 0.
	FindingSignalLags = "signal_lags"
	// FindingSignalsAt is the RFC 3339 time the step's signals are as of.
	FindingSignalsAt = "signals_at"
)

// The baseline signals' suffixes.
const (
	// SuffixBaseline names a signal's value over the window before startsAt.
	SuffixBaseline = "_baseline"
	// SuffixBaselineDay names its value over the same window a day earlier.
	SuffixBaselineDay = "_baseline_1d"
)

// BaselineOf is the name of sig's baseline signal: SuffixBaseline or
// SuffixBaselineDay appended.
func BaselineOf(sig string, dayAgo bool) string {
	if dayAgo {
		return sig + SuffixBaselineDay
	}
	return sig + SuffixBaseline
}

// Where a result's signals came from, as its findings["source"] says. Triage
// merges PromQL's first: its window history beats two local samples.
const (
	SourcePromQL = "promql"
	SourceScrape = "scrape"
)
