package capture

import (
	"fmt"
	"strings"
)

// reading is a set of signals seen through thresholds: the checks the rules
// combine. A missing signal makes every check on it false: unknown is never
// taken for abnormal.
type reading struct {
	s  Signals
	th Thresholds
}

func (r reading) get(name string) (float64, bool) {
	v, ok := r.s[name]
	return v, ok
}

func (r reading) atLeast(name string, thr float64) bool {
	v, ok := r.s[name]
	return ok && v >= thr
}

func (r reading) kvFull() bool      { return r.atLeast(SigKVUsage, r.th.KVUsage) }
func (r reading) queueDeep() bool   { return r.atLeast(SigQueueDepth, r.th.QueueDepth) }
func (r reading) longPrompts() bool { return r.atLeast(SigPromptTokens, r.th.PromptTokensMean) }
func (r reading) ttftHigh() bool    { return r.atLeast(SigTTFTP99, r.th.TTFTP99) }
func (r reading) itlHigh() bool     { return r.atLeast(SigITLP99, r.th.ITLP99) }
func (r reading) wideBatch() bool   { return r.atLeast(SigRunning, r.th.Running) }
func (r reading) aborting() bool    { return r.atLeast(SigAbortRatio, r.th.AbortRatio) }

func (r reading) preempting() bool {
	v, ok := r.get(SigPreemptionsRate)
	return ok && v > r.th.PreemptionsPerS
}

// prefillTime is the mean prefill time, or, when no request finished to report
// one, TTFT p50 while the queue is short: with nothing waiting, time to first
// token is prefill. fromTTFT says which.
func (r reading) prefillTime() (v float64, fromTTFT, ok bool) {
	if v, ok := r.get(SigPrefillMean); ok {
		return v, false, true
	}
	q, okQ := r.get(SigQueueDepth)
	t, okT := r.get(SigTTFTP50)
	if okQ && okT && q < r.th.QueueDepth {
		return t, true, true
	}
	return 0, false, false
}

func (r reading) prefillSlow() bool {
	v, _, ok := r.prefillTime()
	return ok && v >= r.th.PrefillTimeMean
}

// queueDominates says whether waiting is most of the time before prefill ends;
// unknown (no stage split) does not block the overload rule.
func (r reading) queueDominates() bool {
	q, okQ := r.get(SigQueueTimeMean)
	p, okP := r.get(SigPrefillMean)
	if !okQ || !okP || q+p <= 0 {
		return true
	}
	return q/(q+p) >= r.th.QueueShare
}

// slowStage says whether any latency symptom is present.
func (r reading) slowStage() bool { return r.ttftHigh() || r.itlHigh() || r.prefillSlow() }

// rule is one verdict's condition and the evidence lines it shows.
type rule struct {
	id       string
	holds    func(r reading, held map[string]bool) bool
	evidence func(r reading) []string
}

// rules in precedence order (see TriageConfig's doc for the argument).
var rules = []rule{
	{VerdictKVPressure, func(r reading, _ map[string]bool) bool { return r.kvFull() || r.preempting() }, kvEvidence},
	{VerdictOverload, func(r reading, _ map[string]bool) bool {
		return r.queueDeep() && r.queueDominates() && !r.prefillSlow()
	}, overloadEvidence},
	{VerdictPrefillBound, func(r reading, _ map[string]bool) bool {
		return r.longPrompts() && (r.prefillSlow() || r.ttftHigh())
	}, prefillEvidence},
	{VerdictDecodeBound, func(r reading, _ map[string]bool) bool { return r.itlHigh() && r.wideBatch() }, decodeEvidence},
	{VerdictUnexplained, func(r reading, held map[string]bool) bool {
		return r.slowStage() && !held[VerdictKVPressure] && !held[VerdictOverload] &&
			!held[VerdictPrefillBound] && !held[VerdictDecodeBound]
	}, unexplainedEvidence},
	{VerdictClientAborts, func(r reading, _ map[string]bool) bool { return r.aborting() }, abortEvidence},
}

// Diagnose applies the rules to sig: the first rule that holds is the verdict,
// the others that hold are contributing; evidence lists the primary's lines,
// then the contributing ones', then which signals could not be measured.
func Diagnose(sig Signals, th Thresholds) *Verdict {
	r := reading{s: sig, th: th.withDefaults()}
	v := &Verdict{}
	if len(sig) == 0 {
		v.ID = VerdictUnexplained
		v.Evidence = []string{"no tier-1 signals: every metrics step failed or none ran, so the metrics cannot rule anything out"}
		v.Advice = advice[v.ID]
		return v
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
		lines = appendNew(lines, ru.evidence(r)...)
	}
	if v.ID == "" {
		v.ID = VerdictHealthy
		lines = healthyEvidence(r)
	}
	if m := missing(r); m != "" {
		lines = append(lines, m)
	}
	v.Evidence = lines
	v.Advice = advice[v.ID]
	return v
}

// appendNew appends the lines not already present.
func appendNew(lines []string, more ...string) []string {
	for _, l := range more {
		dup := false
		for _, x := range lines {
			dup = dup || x == l
		}
		if !dup && l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// missing names the key signals no step measured.
func missing(r reading) string {
	var out []string
	for _, n := range []string{SigQueueDepth, SigRunning, SigKVUsage, SigTTFTP99, SigITLP99,
		SigPrefillMean, SigPromptTokens, SigAbortRatio} {
		if _, ok := r.get(n); !ok {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "not measured: " + strings.Join(out, ", ")
}

// advice per verdict, in the seed's terms.
var advice = map[string][]string{
	VerdictKVPressure: {
		"raise --gpu-memory-utilization if the GPU has VRAM to spare (a larger KV block pool)",
		"lower --max-num-seqs or --max-model-len to cut concurrent KV demand",
		"check that prefix caching is on and hitting, so shared prefixes reuse KV blocks",
		"if this is steady-state load, add an instance",
	},
	VerdictOverload: {
		"past the knee: traffic exceeds this instance's capacity; a capacity problem, not a code bug",
		"route traffic to other instances or scale out (autoscale on queue depth)",
		"no profile needed: per-request work is flat, the time goes to waiting",
	},
	VerdictPrefillBound: {
		"prompts got longer: check the prompt-length distribution and which clients send long contexts",
		"tune prefill batching: --max-num-batched-tokens (chunked prefill) trades TTFT against decode stalls",
		"make sure prefix caching is on so shared prefixes are not prefilled again",
		"consider separating long-context traffic (its own instances, or disaggregated prefill)",
	},
	VerdictDecodeBound: {
		"decode is memory-bandwidth bound at this batch width: lower --max-num-seqs to narrow the batch (less throughput, faster tokens)",
		"or add instances to spread the concurrent sequences",
	},
	VerdictClientAborts: {
		"clients are timing out: the SLO is already violated for them",
		"compare client timeouts with end-to-end latency (long answers need longer timeouts or streaming)",
		"find which clients abort, and whether the latency before the aborts grew",
	},
	VerdictUnexplained: {
		"escalate to traces (tier 2): which stage of which requests is slow (queue, prefill or decode)",
		"if a stage is slow for no visible reason, take a short framed profile (tier 3) and read the hot kernels",
		"check recent changes: vLLM version, model, drivers, GPU health",
	},
	VerdictHealthy: {
		"nothing in tier 1 explains the alert now: it may be flapping or mis-tuned; check its threshold and `for:`",
	},
}

// fmtSec prints seconds with three significant digits.
func fmtSec(v float64) string { return fmt.Sprintf("%.3g s", v) }

// fmtPct prints a ratio as a percentage.
func fmtPct(v float64) string { return fmt.Sprintf("%.3g%%", 100*v) }

// before appends a baseline, when PromQL gave one, as "(before: …)".
func (r reading) before(name string, f func(float64) string) string {
	if b, ok := r.get(name); ok {
		return " (before: " + f(b) + ")"
	}
	return ""
}
