package triage

import (
	"fmt"
	"math"
	"strings"

	"github.com/autocapture/autocapture/vocab"
)

// Evidence lines: short sentences with the numbers and the thresholds they
// were held against, so the on-call can check the reasoning at a glance.

func kvEvidence(r reading) []string {
	var out []string
	if kv, ok := r.get(vocab.SigKVUsage); ok {
		out = append(out, fmt.Sprintf("KV cache %.3g full (threshold %.3g)", kv, r.th.KVUsage))
	}
	if p, ok := r.get(vocab.SigPreemptionsRate); ok {
		w := r.preemption()
		if p > r.th.PreemptionsPerS {
			out = append(out, fmt.Sprintf("%.3g %ss/s: running requests are evicted and recomputed", p, w))
		} else {
			out = append(out, "no "+w+" in the window yet: the pool is at its ceiling, "+w+" is next")
		}
	}
	return out
}

// preemption is the engine's word for a preemption: SGLang calls it a
// retraction (SGLANG.md §4, team notes), and its on-call searches its logs
// and metrics (num_retracted_requests_total) by that word.
func (r reading) preemption() string {
	if r.vw.dialect.engine == vocab.EngineSGLang {
		return "retraction"
	}
	return "preemption"
}

func overloadEvidence(r reading) []string {
	out := []string{queueLine(r)}
	p, _, okP := r.prefillTime()
	w := r.waitNow()
	switch {
	case w.known:
		out = append(out, waitLine(r, w, p, okP))
		if why := r.histogramLag(); why == "" {
			if q, ok := r.get(vocab.SigQueueTimeMean); ok {
				out = append(out, fmt.Sprintf("finished requests waited %s on average (queue-time histogram)%s", fmtSec(q), r.from(vocab.SigQueueTimeMean)))
			}
		}
	default:
		q, okQ := r.get(vocab.SigQueueTimeMean)
		if okQ && okP && q+p > 0 && r.histogramLag() == "" {
			out = append(out, fmt.Sprintf("requests wait %s in the queue against %s of prefill (%s of the time to first token)%s",
				fmtSec(q), fmtSec(p), fmtPct(q/(q+p)), r.from(vocab.SigQueueTimeMean)))
		} else if okP {
			out = append(out, fmt.Sprintf("prefill %s per request: flat", fmtSec(p)))
		}
	}
	if t, ok := r.get(vocab.SigTTFTP99); ok {
		out = append(out, "TTFT p99 "+fmtSec(t)+r.before(vocab.SigTTFTP99, fmtSec))
	}
	return out
}

// waitLine says how long a request entering the queue now waits, and how
// that was measured.
func waitLine(r reading, w wait, p float64, okP bool) string {
	q, _ := r.get(vocab.SigQueueDepth)
	var s string
	switch {
	case w.stuck:
		return fmt.Sprintf("no request reached its first token in the window (%s 0%s) while %.0f wait: the queue is not draining", w.how, r.from(w.how), q)
	case w.how == vocab.SigQueueOldest:
		s = fmt.Sprintf("the oldest waiting request has waited %s%s", fmtSec(w.secs), r.from(vocab.SigQueueOldest))
	case w.how == vocab.SigQueueWait:
		s = fmt.Sprintf("a request now waits ~%s before prefill%s", fmtSec(w.secs), r.from(vocab.SigQueueWait))
	default:
		a, _ := r.get(w.how)
		s = fmt.Sprintf("a request now waits ~%s before prefill (Little's law: %.0f waiting ÷ %.3g admitted/s by %s%s)",
			fmtSec(w.secs), q, a, w.how, r.from(w.how))
	}
	if okP && w.secs+p > 0 {
		s += fmt.Sprintf(" against %s of prefill (%s of the time to first token)", fmtSec(p), fmtPct(w.secs/(w.secs+p)))
	}
	return s
}

func prefillEvidence(r reading) []string {
	out := []string{promptLine(r), prefillLine(r)}
	if r.ttftHigh() {
		out = append(out, ttftLine(r))
	}
	return out
}

func decodeEvidence(r reading) []string {
	itl, _ := r.get(vocab.SigITLP99)
	run, _ := r.get(vocab.SigRunning)
	return []string{fmt.Sprintf("ITL p99 %s (threshold %s)%s with %.0f requests in the batch (wide from %.0f)",
		fmtSec(itl), fmtSec(r.th.ITLP99), r.before(vocab.SigITLP99, fmtSec), run, r.th.Running)}
}

func unexplainedEvidence(r reading) []string {
	var out []string
	if r.ttftHigh() {
		out = append(out, ttftLine(r))
	}
	if r.itlHigh() {
		itl, _ := r.get(vocab.SigITLP99)
		out = append(out, fmt.Sprintf("ITL p99 %s (threshold %s)%s", fmtSec(itl), fmtSec(r.th.ITLP99), r.before(vocab.SigITLP99, fmtSec)))
	}
	if r.prefillSlow() {
		out = append(out, prefillLine(r))
	}
	return append(out, loadVerdict(r))
}

// loadVerdict is the load line of a verdict that names no load cause: "load
// normal" only when every load signal measured is within its threshold;
// otherwise the load as it is, with why no load cause holds.
func loadVerdict(r reading) string {
	parts, high := loadParts(r)
	if len(parts) == 0 {
		return "load: no load signal measured"
	}
	if !high {
		return "load normal: " + strings.Join(parts, ", ")
	}
	s := "load: " + strings.Join(parts, ", ")
	if why := notOverload(r); why != "" {
		s += "; not overload: " + why
	}
	return s
}

// notOverload says why a deep queue is not overload ("" when it is not deep).
func notOverload(r reading) string {
	if !r.queueDeep() {
		return ""
	}
	if r.prefillSlow() {
		v, _, _ := r.prefillTime()
		if b, ok := r.baselineFor(vocab.SigPrefillMean); ok {
			return fmt.Sprintf("prefill is slow too (%s per request, %s): per-request work grew, not only the waiting",
				fmtSec(v), r.sinceLine(b, v, "slower", "faster", fmtSec, ""))
		}
		return fmt.Sprintf("prefill is slow too (%s per request, slow from %s): per-request work grew, not only the waiting", fmtSec(v), fmtSec(r.th.PrefillTimeMean))
	}
	p, _, okP := r.prefillTime()
	if w := r.waitNow(); w.known && !w.stuck {
		if w.secs < r.th.QueueWait {
			return waitLine(r, w, p, okP) + fmt.Sprintf(": it drains faster than %s", fmtSec(r.th.QueueWait))
		}
		return waitLine(r, w, p, okP) + fmt.Sprintf(": waiting is under %s of it", fmtPct(r.th.QueueShare))
	}
	if q, ok := r.get(vocab.SigQueueTimeMean); ok && okP {
		return fmt.Sprintf("finished requests waited %s against %s of prefill (under %s)%s", fmtSec(q), fmtSec(p), fmtPct(r.th.QueueShare), r.from(vocab.SigQueueTimeMean))
	}
	return ""
}

func abortEvidence(r reading) []string {
	a, _ := r.get(vocab.SigAbortRatio)
	return []string{fmt.Sprintf("%s of finished requests aborted by clients (threshold %s)", fmtPct(a), fmtPct(r.th.AbortRatio))}
}

func healthyEvidence(r reading) []string {
	_, high := loadParts(r)
	first := "every tier-1 signal is within its threshold: " + loadLine(r)
	if high {
		first = "no cause holds: " + loadVerdict(r)
	}
	out := []string{first}
	var lat []string
	if t, ok := r.get(vocab.SigTTFTP99); ok {
		lat = append(lat, "TTFT p99 "+fmtSec(t))
	}
	if t, ok := r.get(vocab.SigITLP99); ok {
		lat = append(lat, "ITL p99 "+fmtSec(t))
	}
	if len(lat) > 0 {
		out = append(out, strings.Join(lat, ", "))
	}
	return out
}

func queueLine(r reading) string {
	q, _ := r.get(vocab.SigQueueDepth)
	s := fmt.Sprintf("queue %.0f waiting (threshold %.0f)", q, r.th.QueueDepth)
	if run, ok := r.get(vocab.SigRunning); ok {
		s += fmt.Sprintf("; batch %.0f running", run)
	}
	s += r.from(vocab.SigQueueDepth)
	if g, ok := r.get(vocab.SigQueueGrowth); ok && g != 0 {
		verb := "growing"
		if g < 0 {
			verb = "shrinking"
		}
		s += fmt.Sprintf("; %s %.2g/s%s", verb, math.Abs(g), r.from(vocab.SigQueueGrowth))
	}
	return s
}

func ttftLine(r reading) string {
	t, ok := r.get(vocab.SigTTFTP99)
	if m, okM := r.get(vocab.SigTTFTP50); okM && m >= r.th.TTFTP99 && (!ok || t < r.th.TTFTP99) {
		return fmt.Sprintf("TTFT p50 %s%s: past the %s threshold, so the p99 is too", fmtSec(m), r.from(vocab.SigTTFTP50), fmtSec(r.th.TTFTP99))
	}
	return fmt.Sprintf("TTFT p99 %s (threshold %s)%s", fmtSec(t), fmtSec(r.th.TTFTP99), r.before(vocab.SigTTFTP99, fmtSec))
}

// prefillLine reports prefill time, where it came from, and the prefill speed
// (prompt tokens per second of prefill) when both are known.
func prefillLine(r reading) string {
	v, fromTTFT, ok := r.prefillTime()
	if !ok {
		return ""
	}
	s := fmt.Sprintf("prefill %s per request (slow from %s)", fmtSec(v), fmtSec(r.th.PrefillTimeMean))
	if b, okB := r.baselineFor(vocab.SigPrefillMean); okB {
		s = fmt.Sprintf("prefill %s per request, %s; slow from %.2g×", fmtSec(v), r.sinceLine(b, v, "slower", "faster", fmtSec, ""), r.th.PrefillGrowth)
	}
	if fromTTFT {
		s = fmt.Sprintf("TTFT p50 %s with the queue short, so prefill takes about that (slow from %s)", fmtSec(v), fmtSec(r.th.PrefillTimeMean))
		if b, okB := r.baselineFor(vocab.SigPrefillMean); okB {
			s = fmt.Sprintf("TTFT p50 %s with the queue short, so prefill takes about that: %s; slow from %.2g×", fmtSec(v),
				r.sinceLine(b, v, "slower", "faster", fmtSec, ""), r.th.PrefillGrowth)
		}
	}
	if n, _, okN := r.prompts(); okN && v > 0 {
		s += fmt.Sprintf(", ~%.0f prompt tokens/s", n/v)
	}
	return s
}

// loadLine lists the load signals that were measured.
func loadLine(r reading) string {
	parts, _ := loadParts(r)
	if len(parts) == 0 {
		return "no load signal measured"
	}
	return strings.Join(parts, ", ")
}

// loadParts lists the load signals measured, each above its threshold marked
// so ("queue 48 waiting (deep from 10)"), and whether any was.
func loadParts(r reading) (parts []string, high bool) {
	mark := func(s string, over bool, thr string) {
		if over {
			s += " (" + thr + ")"
			high = true
		}
		parts = append(parts, s)
	}
	if q, ok := r.get(vocab.SigQueueDepth); ok {
		mark(fmt.Sprintf("queue %.0f", q), r.queueDeep(), fmt.Sprintf("deep from %.0f", r.th.QueueDepth))
	}
	if v, ok := r.get(vocab.SigRunning); ok {
		mark(fmt.Sprintf("batch %.0f running", v), r.wideBatch(), fmt.Sprintf("wide from %.0f", r.th.Running))
	}
	if v, _, ok := r.prompts(); ok {
		thr := "long from " + fmtTokens(r.th.PromptTokensMean)
		if b, okB := r.baselineFor(promptSigs...); okB {
			thr = fmt.Sprintf("%.2g× its %s, long from %.2g×", v/b.v, fmtTokens(b.v), r.th.PromptGrowth)
		}
		mark(fmt.Sprintf("prompts %s tokens", fmtTokens(v)), r.longPrompts(), thr)
	}
	if v, ok := r.get(vocab.SigKVUsage); ok {
		mark(fmt.Sprintf("KV %.2g", v), r.kvFull(), fmt.Sprintf("full from %.2g", r.th.KVUsage))
	}
	if v, ok := r.get(vocab.SigPreemptionsRate); ok {
		if v == 0 {
			parts = append(parts, "no "+r.preemption()+"s")
		} else {
			mark(fmt.Sprintf("%.2g %ss/s", v, r.preemption()), r.preempting(), fmt.Sprintf("pressure from %.2g/s", r.th.PreemptionsPerS))
		}
	}
	return parts, high
}
