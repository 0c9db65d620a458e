package capture

import (
	"fmt"
	"strings"
)

// Evidence lines: short sentences with the numbers and the thresholds they
// were held against, so the on-call can check the reasoning at a glance.

func kvEvidence(r reading) []string {
	var out []string
	if kv, ok := r.get(SigKVUsage); ok {
		out = append(out, fmt.Sprintf("KV cache %.3g full (threshold %.3g)", kv, r.th.KVUsage))
	}
	if p, ok := r.get(SigPreemptionsRate); ok {
		if p > r.th.PreemptionsPerS {
			out = append(out, fmt.Sprintf("%.3g preemptions/s: running requests are evicted and recomputed", p))
		} else {
			out = append(out, "no preemption in the window yet: the pool is at its ceiling, preemption is next")
		}
	}
	return out
}

func overloadEvidence(r reading) []string {
	out := []string{queueLine(r)}
	q, okQ := r.get(SigQueueTimeMean)
	p, okP := r.get(SigPrefillMean)
	if okQ && okP && q+p > 0 {
		out = append(out, fmt.Sprintf("requests wait %s in the queue against %s of prefill (%s of the time to first token)",
			fmtSec(q), fmtSec(p), fmtPct(q/(q+p))))
	} else if okP {
		out = append(out, fmt.Sprintf("prefill %s per request: flat", fmtSec(p)))
	}
	if t, ok := r.get(SigTTFTP99); ok {
		out = append(out, "TTFT p99 "+fmtSec(t)+r.before(SigTTFTP99Baseline, fmtSec))
	}
	return out
}

func prefillEvidence(r reading) []string {
	var out []string
	if n, ok := r.get(SigPromptTokens); ok {
		out = append(out, fmt.Sprintf("prompts %.0f tokens on average (long from %.0f)%s", n, r.th.PromptTokensMean,
			r.before(SigPromptTokensBase, func(v float64) string { return fmt.Sprintf("%.0f", v) })))
	}
	out = append(out, prefillLine(r))
	if r.ttftHigh() {
		out = append(out, ttftLine(r))
	}
	return out
}

func decodeEvidence(r reading) []string {
	itl, _ := r.get(SigITLP99)
	run, _ := r.get(SigRunning)
	return []string{fmt.Sprintf("ITL p99 %s (threshold %s)%s with %.0f requests in the batch (wide from %.0f)",
		fmtSec(itl), fmtSec(r.th.ITLP99), r.before(SigITLP99Baseline, fmtSec), run, r.th.Running)}
}

func unexplainedEvidence(r reading) []string {
	var out []string
	if r.ttftHigh() {
		out = append(out, ttftLine(r))
	}
	if r.itlHigh() {
		itl, _ := r.get(SigITLP99)
		out = append(out, fmt.Sprintf("ITL p99 %s (threshold %s)%s", fmtSec(itl), fmtSec(r.th.ITLP99), r.before(SigITLP99Baseline, fmtSec)))
	}
	if r.prefillSlow() {
		out = append(out, prefillLine(r))
	}
	return append(out, "load normal: "+loadLine(r))
}

func abortEvidence(r reading) []string {
	a, _ := r.get(SigAbortRatio)
	return []string{fmt.Sprintf("%s of finished requests aborted by clients (threshold %s)", fmtPct(a), fmtPct(r.th.AbortRatio))}
}

func healthyEvidence(r reading) []string {
	out := []string{"every tier-1 signal is within its threshold: " + loadLine(r)}
	var lat []string
	if t, ok := r.get(SigTTFTP99); ok {
		lat = append(lat, "TTFT p99 "+fmtSec(t))
	}
	if t, ok := r.get(SigITLP99); ok {
		lat = append(lat, "ITL p99 "+fmtSec(t))
	}
	if len(lat) > 0 {
		out = append(out, strings.Join(lat, ", "))
	}
	return out
}

func queueLine(r reading) string {
	q, _ := r.get(SigQueueDepth)
	s := fmt.Sprintf("queue %.0f waiting (threshold %.0f)", q, r.th.QueueDepth)
	if run, ok := r.get(SigRunning); ok {
		s += fmt.Sprintf("; batch %.0f running", run)
	}
	return s
}

func ttftLine(r reading) string {
	t, _ := r.get(SigTTFTP99)
	return fmt.Sprintf("TTFT p99 %s (threshold %s)%s", fmtSec(t), fmtSec(r.th.TTFTP99), r.before(SigTTFTP99Baseline, fmtSec))
}

// prefillLine reports prefill time, where it came from, and the prefill speed
// (prompt tokens per second of prefill) when both are known.
func prefillLine(r reading) string {
	v, fromTTFT, ok := r.prefillTime()
	if !ok {
		return ""
	}
	s := fmt.Sprintf("prefill %s per request (slow from %s)%s", fmtSec(v), fmtSec(r.th.PrefillTimeMean), r.before(SigPrefillMeanBaseline, fmtSec))
	if fromTTFT {
		s = fmt.Sprintf("TTFT p50 %s with the queue short, so prefill takes about that (slow from %s)", fmtSec(v), fmtSec(r.th.PrefillTimeMean))
	}
	if n, okN := r.get(SigPromptTokens); okN && v > 0 {
		s += fmt.Sprintf(", ~%.0f prompt tokens/s", n/v)
	}
	return s
}

// loadLine lists the load signals that were measured.
func loadLine(r reading) string {
	var parts []string
	if q, ok := r.get(SigQueueDepth); ok {
		parts = append(parts, fmt.Sprintf("queue %.0f", q))
	}
	if v, ok := r.get(SigRunning); ok {
		parts = append(parts, fmt.Sprintf("batch %.0f running", v))
	}
	if v, ok := r.get(SigPromptTokens); ok {
		parts = append(parts, fmt.Sprintf("prompts %.0f tokens", v))
	}
	if v, ok := r.get(SigKVUsage); ok {
		parts = append(parts, fmt.Sprintf("KV %.2g", v))
	}
	if v, ok := r.get(SigPreemptionsRate); ok && v == 0 {
		parts = append(parts, "no preemptions")
	}
	if len(parts) == 0 {
		return "no load signal measured"
	}
	return strings.Join(parts, ", ")
}
