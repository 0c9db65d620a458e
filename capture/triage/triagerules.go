package triage

import (
	"fmt"
	"sort"
	"strings"

	"github.com/autocapture/autocapture/capture/internal/views"
	"github.com/autocapture/autocapture/vocab"
)

// reading is a set of signals seen through thresholds: the checks the rules
// combine. A missing signal makes every check on it false: unknown is never
// taken for abnormal. org says where each signal came from (may be empty).
type reading struct {
	s   vocab.Signals
	th  Thresholds
	org map[string]vocab.Origin
	// noBaselines judges every signal by its absolute threshold
	// (Config.IgnoreBaselines).
	noBaselines bool
	// vw are the views beyond the instance's own series (capture/internal/views): its
	// peers and its GPUs; nil when no step looked.
	vw beyond
}

func (r reading) get(name string) (float64, bool) {
	v, ok := r.s[name]
	return v, ok
}

func (r reading) atLeast(name string, thr float64) bool {
	v, ok := r.s[name]
	return ok && v >= thr
}

func (r reading) kvFull() bool    { return r.atLeast(vocab.SigKVUsage, r.th.KVUsage) }
func (r reading) queueDeep() bool { return r.atLeast(vocab.SigQueueDepth, r.th.QueueDepth) }
func (r reading) itlHigh() bool   { return r.atLeast(vocab.SigITLP99, r.th.ITLP99) }
func (r reading) wideBatch() bool { return r.atLeast(vocab.SigRunning, r.th.Running) }
func (r reading) aborting() bool  { return r.atLeast(vocab.SigAbortRatio, r.th.AbortRatio) }

func (r reading) preempting() bool {
	v, ok := r.get(vocab.SigPreemptionsRate)
	return ok && v > r.th.PreemptionsPerS
}

// prefillTime is the prefill time now: TTFT p50 while the queue is short
// (with nothing waiting, time to first token is prefill, and it is observed
// at the first token, as it happens) when it is the larger, else the mean
// prefill time of finished requests. The mean lags at the onset of longer
// prompts (it is observed at the finish); TTFT p50 does not. fromTTFT says
// which.
func (r reading) prefillTime() (v float64, fromTTFT, ok bool) {
	m, okM := r.get(vocab.SigPrefillMean)
	q, okQ := r.get(vocab.SigQueueDepth)
	t, okT := r.get(vocab.SigTTFTP50)
	if okQ && okT && q < r.th.QueueDepth && (!okM || t > m) {
		return t, true, true
	}
	return m, false, okM
}

// ttftHigh: TTFT p99 is past the alert's threshold, or its median is, which
// bounds the p99 from below (a scrape gap with too few first tokens for a p99
// still has a median, and at onset it is the one that is current).
func (r reading) ttftHigh() bool {
	return r.atLeast(vocab.SigTTFTP99, r.th.TTFTP99) || r.atLeast(vocab.SigTTFTP50, r.th.TTFTP99)
}

// admitRate is the rate the queue drains at and the signal it came from:
// first tokens per second (counted as they happen), else finishes per second
// (with the batch full, each finish frees the slot the next admission takes).
func (r reading) admitRate() (v float64, from string, ok bool) {
	for _, n := range []string{vocab.SigAdmitRate, vocab.SigRequestRate} {
		if v, ok := r.get(n); ok {
			return v, n, true
		}
	}
	return 0, "", false
}

// wait is the time a request entering the queue now waits before prefill.
type wait struct {
	secs  float64
	stuck bool   // requests wait and none was admitted in the window
	how   string // SigQueueOldest, SigQueueWait (a source's), or the admitted-rate signal of Little's law
	known bool
}

// waitNow is the current wait: the oldest waiting request's age, a source's
// own estimate, or Little's law (waiting ÷ admitted rate). It reads gauges and
// counters that move as requests do, never the lifecycle histograms.
func (r reading) waitNow() wait {
	if v, ok := r.get(vocab.SigQueueOldest); ok {
		return wait{secs: v, how: vocab.SigQueueOldest, known: true}
	}
	if v, ok := r.get(vocab.SigQueueWait); ok {
		return wait{secs: v, how: vocab.SigQueueWait, known: true}
	}
	q, okQ := r.get(vocab.SigQueueDepth)
	a, from, okA := r.admitRate()
	switch {
	case !okQ || !okA:
		return wait{}
	case q <= 0:
		return wait{how: from, known: true}
	case a <= 0:
		return wait{stuck: true, how: from, known: true}
	}
	return wait{secs: q / a, how: from, known: true}
}

// histogramLag says why the queue-time histogram cannot speak for a deep
// queue now ("" when it can, when there is none, or when the queue is not deep:
// only overload consults it). It is weighed by how many
// requests it covers (queue_time_count, when the same step gave both) and, under
// a deep queue, by Little's law: its mean wait × the admitted rate is the queue
// it implies; when that is a small part of the queue now, the requests it
// counted finished before the queue built up.
func (r reading) histogramLag() string {
	qt, ok := r.get(vocab.SigQueueTimeMean)
	if !ok || !r.queueDeep() { // only a deep queue consults it
		return ""
	}
	q, _ := r.get(vocab.SigQueueDepth)
	n, okN := r.get(vocab.SigQueueTimeN)
	if okN && r.sameStep(vocab.SigQueueTimeN, vocab.SigQueueTimeMean) && n < r.th.HistMinRequests {
		return fmt.Sprintf("queue-time histogram lags: %.0f requests finished in the window, %.0f waiting (trusted from %.0f)%s",
			n, q, r.th.HistMinRequests, r.from(vocab.SigQueueTimeMean))
	}
	a, from, okA := r.admitRate()
	if !okA {
		return ""
	}
	if implied := qt * a; implied < r.th.HistMinCoverage*q {
		return fmt.Sprintf("queue-time histogram lags: its mean wait %s × %.3g admitted/s (%s) accounts for %.2g of the %.0f waiting now; the requests it counted finished before the queue built up%s",
			fmtSec(qt), a, from, implied, q, r.from(vocab.SigQueueTimeMean))
	}
	return ""
}

// sameStep says whether two signals came from the same step (or origins are unknown).
func (r reading) sameStep(a, b string) bool {
	oa, okA := r.org[a]
	ob, okB := r.org[b]
	return !okA || !okB || oa.Step == ob.Step
}

// queueDominates says whether waiting is most of the time before prefill ends.
// The current wait decides; with none known, a trusted queue-time histogram;
// unknown (neither) does not block the overload rule.
func (r reading) queueDominates() bool {
	p, _, okP := r.prefillTime()
	if w := r.waitNow(); w.known {
		switch {
		case w.stuck:
			return true
		case w.secs < r.th.QueueWait:
			return false
		}
		return !okP || w.secs/(w.secs+p) >= r.th.QueueShare
	}
	q, okQ := r.get(vocab.SigQueueTimeMean)
	if !okQ || !okP || q+p <= 0 || r.histogramLag() != "" {
		return true
	}
	return q/(q+p) >= r.th.QueueShare
}

// untrusted lists the signals set aside, with why.
func (r reading) untrusted() []string {
	var out []string
	if why := r.histogramLag(); why != "" {
		out = append(out, why)
	}
	return out
}

// slowStage says whether any latency symptom is present.
func (r reading) slowStage() bool { return r.ttftHigh() || r.itlHigh() || r.prefillSlow() }

// rule is one verdict's condition and the evidence lines it shows.
type rule struct {
	id       string
	holds    func(r reading, held map[string]bool) bool
	evidence func(r reading) []string
}

// rules in precedence order (see Config's doc for the argument).
var rules = []rule{
	{vocab.VerdictKVPressure, func(r reading, _ map[string]bool) bool { return r.kvFull() || r.preempting() }, kvEvidence},
	{vocab.VerdictOverload, func(r reading, _ map[string]bool) bool {
		return r.queueDeep() && r.queueDominates() && !r.prefillSlow()
	}, overloadEvidence},
	{vocab.VerdictPrefillBound, func(r reading, _ map[string]bool) bool {
		return r.longPrompts() && (r.prefillSlow() || r.ttftHigh())
	}, prefillEvidence},
	{vocab.VerdictGPUDegraded, func(r reading, _ map[string]bool) bool { return r.gpuDegraded() }, gpuEvidence},
	{vocab.VerdictDecodeBound, func(r reading, _ map[string]bool) bool { return r.itlHigh() && r.wideBatch() }, decodeEvidence},
	{vocab.VerdictUnexplained, func(r reading, held map[string]bool) bool {
		return r.slowStage() && !held[vocab.VerdictKVPressure] && !held[vocab.VerdictOverload] &&
			!held[vocab.VerdictPrefillBound] && !held[vocab.VerdictGPUDegraded] && !held[vocab.VerdictDecodeBound]
	}, unexplainedEvidence},
	{vocab.VerdictClientAborts, func(r reading, _ map[string]bool) bool { return r.aborting() }, abortEvidence},
}

// Diagnose applies the rules to sig: the first rule that holds is the verdict,
// the others that hold are contributing; evidence lists the primary's lines,
// then the contributing ones', then which signals could not be measured and
// which were not trusted.
func Diagnose(sig vocab.Signals, th Thresholds) *vocab.Verdict {
	v, _ := diagnose(sig, nil, th, false, beyond{})
	return v
}

// diagnose is Diagnose with the signals' origins, and returns the signals it
// derived (the current wait by Little's law). noBaselines judges by the
// absolute thresholds alone.
func diagnose(sig vocab.Signals, org map[string]vocab.Origin, th Thresholds, noBaselines bool, vw beyond) (*vocab.Verdict, vocab.Signals) {
	r := reading{s: sig, th: th.withDefaults(), org: org, noBaselines: noBaselines, vw: vw}
	v := &vocab.Verdict{}
	if len(sig) == 0 {
		v.ID = vocab.VerdictNoEvidence
		v.Evidence = append([]string{"nothing measured: no tier-1 reading came through (every metrics step failed or none ran), so nothing is explained or ruled out"}, gpuContext(r)...)
		v.Advice = adviceFor(v.ID, vw.dialect.engine)
		return v, nil
	}
	held := map[string]bool{}
	var lines []string
	for _, ru := range rules {
		if !ru.holds(r, held) {
			continue
		}
		held[ru.id] = true
		if v.ID == "" {
			v.ID = ru.id
		} else {
			v.Contributing = append(v.Contributing, ru.id)
		}
		lines = views.AppendNew(lines, ru.evidence(r)...)
	}
	if v.ID == "" {
		v.ID = vocab.VerdictHealthy
		lines = healthyEvidence(r)
	}
	// Where the cause sits (triagescope.go): its own field, with its
	// contributing factors (single-instance, fleet-wide, routing-imbalance)
	// and evidence lines.
	var scopeLines []string
	v.Scope, scopeLines = r.scope(v, held)
	lines = views.AppendNew(lines, scopeLines...)
	lines = views.AppendNew(lines, gpuContext(r)...) // "GPU not measured" is said, never taken for healthy
	lines = append(lines, missing(r)...)
	lines = append(lines, dialectLines(r)...)
	v.Untrusted = r.untrusted()
	if len(v.Untrusted) > 0 {
		lines = append(lines, "not trusted: "+strings.Join(v.Untrusted, "; "))
	}
	v.Basis = r.basis()
	if line := basisLine(v.Basis); line != "" {
		lines = append(lines, line)
	}
	v.Evidence = lines
	v.Advice = adviceFor(v.ID, vw.dialect.engine)
	var derived vocab.Signals
	if _, given := sig[vocab.SigQueueWait]; !given {
		if w := r.waitNow(); w.known && !w.stuck {
			derived = vocab.Signals{vocab.SigQueueWait: w.secs}
		}
	}
	return v, derived
}

// missing names the key signals no step measured. A signal the engine's
// dialect has no series for is said so, one line each ("prefill_time_mean:
// not exposed by SGLang v0.3.6–v0.4"): a gap in what the engine tells, not
// an outage of the metrics.
func missing(r reading) []string {
	var out, gaps []string
	for _, n := range []string{vocab.SigQueueDepth, vocab.SigRunning, vocab.SigKVUsage, vocab.SigPreemptionsRate,
		vocab.SigTTFTP99, vocab.SigITLP99, vocab.SigPrefillMean, vocab.SigPromptTokens, vocab.SigAbortRatio} {
		if _, ok := r.get(n); ok {
			continue
		}
		if why := r.vw.dialect.notExposed[n]; why != "" {
			gaps = append(gaps, n+": "+why)
		} else if n != vocab.SigPreemptionsRate { // vLLM's rate is absent only with its Prometheus and scrape both down
			out = append(out, n)
		}
	}
	if len(out) > 0 {
		gaps = append(gaps, "not measured: "+strings.Join(out, ", "))
	}
	return gaps
}

// dialectLines are what the engine tells beyond the canonical signals, and
// how its figures differ from vLLM's (an SGLang server: SGLANG.md §3, §4).
func dialectLines(r reading) []string {
	d := r.vw.dialect
	if d.engine == "" {
		return nil
	}
	var out []string
	// A figure at 0 is left to the findings: SGLang writes every scheduler
	// gauge at each log point, so a server without speculative decoding, PD
	// or grammars reports spec_accept_rate 0 and empty PD queues, which
	// would read as a finding ("no draft accepted").
	keys := make([]string, 0, len(d.extras))
	for k, v := range d.extras {
		if v != 0 {
			keys = append(keys, k)
		}
	}
	if len(keys) > 0 {
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s %.3g", k, d.extras[k])
		}
		out = append(out, d.engine+" also reports: "+strings.Join(parts, ", "))
	}
	for _, n := range d.notes {
		out = append(out, d.engine+": "+n)
	}
	return out
}

// advice per verdict, in the seed's terms.
var advice = map[string][]string{
	vocab.VerdictKVPressure: {
		"raise --gpu-memory-utilization if the GPU has VRAM to spare (a larger KV block pool)",
		"lower --max-num-seqs or --max-model-len to cut concurrent KV demand",
		"check that prefix caching is on and hitting, so shared prefixes reuse KV blocks",
		"if this is steady-state load, add an instance",
	},
	vocab.VerdictOverload: {
		"past the knee: traffic exceeds this instance's capacity; a capacity problem, not a code bug",
		"route traffic to other instances or scale out (autoscale on queue depth)",
		"no profile needed: per-request work is flat, the time goes to waiting",
	},
	vocab.VerdictPrefillBound: {
		"prompts got longer: check the prompt-length distribution and which clients send long contexts",
		"tune prefill batching: --max-num-batched-tokens (chunked prefill) trades TTFT against decode stalls",
		"make sure prefix caching is on so shared prefixes are not prefilled again",
		"consider separating long-context traffic (its own instances, or disaggregated prefill)",
	},
	vocab.VerdictDecodeBound: {
		"decode is memory-bandwidth bound at this batch width: lower --max-num-seqs to narrow the batch (less throughput, faster tokens)",
		"or add instances to spread the concurrent sequences",
	},
	vocab.VerdictClientAborts: {
		"clients are timing out: the SLO is already violated for them",
		"compare client timeouts with end-to-end latency (long answers need longer timeouts or streaming)",
		"find which clients abort, and whether the latency before the aborts grew",
	},
	vocab.VerdictUnexplained: {
		"escalate to traces (tier 2): which stage of which requests is slow (queue, prefill or decode)",
		"if a stage is slow for no visible reason, take a short framed profile (tier 3) and read the hot kernels",
		"check recent changes: " + engineWord + " version, model, drivers, GPU health",
	},
	vocab.VerdictGPUDegraded: {
		"the GPU itself is slow: every kernel is slower, so a profile would only show \"everything slow\"; fix the hardware first",
		"thermal or HW slowdown: check the node's cooling (fans, inlet temperature, airflow) and the GPU's temperature history",
		"power cap or power brake: check the power limit (nvidia-smi -q -d POWER) and the node's power supply",
		"an XID or uncorrectable ECC error: drain the node, reset the GPU (nvidia-smi -r) and watch it; a repeated XID means RMA",
		"route traffic away from this instance meanwhile",
	},
	vocab.VerdictHealthy: {
		"nothing in tier 1 explains the alert now: it may be flapping or mis-tuned; check its threshold and `for:`",
	},
	vocab.VerdictNoEvidence: {
		"fix what the evidence names first: a Prometheus the daemon can reach (prometheus.url), the instance's /metrics reachable from the daemon (targets.allow)",
		"then fire the alert again (or replay it with `autocapture replay`): a verdict needs at least one tier-1 reading",
		"traces and a profile would not tell the cause without the metrics to place them",
	},
}

// engineWord stands in advice for the engine the run is about (adviceFor).
const engineWord = "{engine}"

// adviceFor is the verdict's advice in the words of the run's engine ("" is
// vLLM's): an SGLang run is not told to check its vLLM version.
func adviceFor(id, engine string) []string {
	out := make([]string, 0, len(advice[id]))
	for _, a := range advice[id] {
		out = append(out, strings.ReplaceAll(a, engineWord, vocab.EngineName(engine)))
	}
	return out
}

// fmtSec prints seconds with three significant digits.
func fmtSec(v float64) string { return fmt.Sprintf("%.3g s", v) }

// fmtPct prints a ratio as a percentage.
func fmtPct(v float64) string { return fmt.Sprintf("%.3g%%", 100*v) }

// from tags a decisive number with where it came from: "[scrape over 2s]",
// "[snapshot over 2m]", "[scrape now]"; "" when the origin is unknown.
func (r reading) from(name string) string {
	o, ok := r.org[name]
	if !ok || o.Step == "" || o.Step == "triage" {
		return ""
	}
	s := " [" + o.Step
	switch {
	case o.Window == 0:
		s += " now"
	case o.Window > 0:
		s += " over " + fmtSpan(o.Window)
	}
	if o.Age >= 1 {
		s += ", " + fmtSpan(o.Age) + " old"
	}
	return s + "]"
}

// fmtSpan prints seconds as a short span: 1.9s, 45s, 2m, 1.5h.
func fmtSpan(sec float64) string {
	switch {
	case sec < 10:
		return fmt.Sprintf("%.2gs", sec)
	case sec < 120:
		return fmt.Sprintf("%.0fs", sec)
	case sec < 7200:
		return fmt.Sprintf("%.3gm", sec/60)
	}
	return fmt.Sprintf("%.3gh", sec/3600)
}

// before appends sig's baseline, when PromQL gave one, as "(before: …)" or
// "(a day earlier: …)".
func (r reading) before(sig string, f func(float64) string) string {
	b, ok := r.baselineFor(sig)
	switch {
	case !ok:
		return ""
	case b.basis == vocab.BasisDay:
		return " (a day earlier: " + f(b.v) + ")"
	}
	return " (before: " + f(b.v) + ")"
}

// basisLine says which comparison judged the instance's workload, when any
// was against its own past: "judged against the instance's own past:
// prompt_tokens_now (baseline-before); by absolute thresholds (no
// baseline): prefill_time_mean".
func basisLine(basis map[string]string) string {
	var base, abs []string
	for _, s := range []string{vocab.SigPromptTokensNow, vocab.SigPromptTokens, vocab.SigPrefillMean} {
		switch b, ok := basis[s]; {
		case !ok:
		case b == vocab.BasisAbsolute:
			abs = append(abs, s)
		default:
			base = append(base, s+" ("+b+")")
		}
	}
	if len(base) == 0 {
		return ""
	}
	line := "judged against the instance's own past: " + strings.Join(base, ", ")
	if len(abs) > 0 {
		line += "; by absolute thresholds (no baseline): " + strings.Join(abs, ", ")
	}
	return line
}
