package triage

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/autocapture/autocapture/vocab"
)

// Against the instance's own past. A fleet's normal differs from instance to
// instance (a RAG service's prompts are always 6,000 tokens; a chat service's
// 300), so where the snapshot read a signal's baseline (the window before the
// alert, or the same hour a day earlier: capture/prometheus/baseline.go), the rules
// about the instance's workload judge the change, not the level:
//
//	prompts long    prompt length >= prompt_growth × its baseline
//	                (no baseline: >= prompt_tokens_mean)
//	prefill slow    prefill time >= prefill_growth × its baseline
//	                (no baseline: >= prefill_time_mean)
//
// The "before" window wins over the day-ago one (it is the nearer past);
// absolute thresholds are the fallback when neither exists, or when the step
// says ignore_baselines. Symptoms (TTFT, ITL, the queue, the KV pool, aborts)
// stay absolute: they are the SLO and the engine's limits, the same for every
// instance. Verdict.Basis says, per judged signal, which comparison decided.

// baseline is a signal's baseline, the signal it was read for and which one.
type baseline struct {
	v     float64
	name  string // the baseline signal, e.g. prompt_tokens_mean_baseline
	basis string // BasisBefore or BasisDay
}

// baselineFor is the first baseline of any of sigs, "before" ones first;
// sigs are alternative readings of one quantity (the prompt length now and
// per finished request), best first. A zero baseline compares with nothing.
func (r reading) baselineFor(sigs ...string) (baseline, bool) {
	if r.noBaselines {
		return baseline{}, false
	}
	for _, day := range []bool{false, true} {
		for _, s := range sigs {
			n := vocab.BaselineOf(s, day)
			if v, ok := r.get(n); ok && v > 0 {
				b := baseline{v: v, name: n, basis: vocab.BasisBefore}
				if day {
					b.basis = vocab.BasisDay
				}
				return b, true
			}
		}
	}
	return baseline{}, false
}

// promptSigs are the readings of prompt length, best first: per request
// admitted now (prompt tokens prefilled ÷ first tokens, both counted as they
// happen), then per request finished (the histogram, which lags at onset).
var promptSigs = []string{vocab.SigPromptTokensNow, vocab.SigPromptTokens}

// prompts is the prompt length now and the signal it came from.
func (r reading) prompts() (float64, string, bool) {
	for _, s := range promptSigs {
		if v, ok := r.get(s); ok {
			return v, s, true
		}
	}
	return 0, "", false
}

// longPrompts: prompts grew against the instance's baseline, or, with none,
// are long by the threshold.
func (r reading) longPrompts() bool {
	n, _, ok := r.prompts()
	if !ok {
		return false
	}
	if b, ok := r.baselineFor(promptSigs...); ok {
		return n >= r.th.PromptGrowth*b.v
	}
	return n >= r.th.PromptTokensMean
}

// prefillSlow: prefill time grew against its baseline, or, with none, is slow
// by the threshold.
func (r reading) prefillSlow() bool {
	v, _, ok := r.prefillTime()
	if !ok {
		return false
	}
	if b, ok := r.baselineFor(vocab.SigPrefillMean); ok {
		return v >= r.th.PrefillGrowth*b.v
	}
	return v >= r.th.PrefillTimeMean
}

// basis says how each judged signal was compared (Verdict.Basis).
func (r reading) basis() map[string]string {
	out := map[string]string{}
	if _, s, ok := r.prompts(); ok {
		out[s] = vocab.BasisAbsolute
		if b, ok := r.baselineFor(promptSigs...); ok {
			out[s] = b.basis
		}
	}
	if _, _, ok := r.prefillTime(); ok {
		out[vocab.SigPrefillMean] = vocab.BasisAbsolute
		if b, ok := r.baselineFor(vocab.SigPrefillMean); ok {
			out[vocab.SigPrefillMean] = b.basis
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// sinceLine says how a value compares with its baseline: "4.8× longer than
// the 30m before the alert (312 → 1,498 tokens)".
func (r reading) sinceLine(b baseline, cur float64, more, less string, f func(float64) string, unit string) string {
	ratio := cur / b.v
	word := more
	if ratio < 1 {
		word, ratio = less, 1/ratio
	}
	return fmt.Sprintf("%.2g× %s than %s (%s → %s%s)", ratio, word, r.whenBaseline(b), f(b.v), f(cur), unit)
}

// whenBaseline names a baseline's window: "the 30m before the alert", "the
// same window a day earlier".
func (r reading) whenBaseline(b baseline) string {
	if b.basis == vocab.BasisDay {
		return "the same time a day earlier"
	}
	if o, ok := r.org[b.name]; ok && o.Window > 0 {
		return "the " + fmtSpan(o.Window) + " before the alert"
	}
	return "before the alert"
}

// promptLine is the prompt-length evidence: the change against the baseline,
// or the level against the threshold.
func promptLine(r reading) string {
	n, s, ok := r.prompts()
	if !ok {
		return ""
	}
	how := ""
	if s == vocab.SigPromptTokensNow {
		how = " (prompt tokens per admitted request)"
	}
	if b, ok := r.baselineFor(promptSigs...); ok {
		return "prompts " + r.sinceLine(b, n, "longer", "shorter", fmtTokens, " tokens") + how + r.from(s) +
			fmt.Sprintf("; long from %.2g×", r.th.PromptGrowth)
	}
	return fmt.Sprintf("prompts %s tokens on average (long from %s)%s%s", fmtTokens(n), fmtTokens(r.th.PromptTokensMean), how, r.from(s))
}

// fmtTokens prints a token count with thousands separators: 1,498.
func fmtTokens(v float64) string {
	s := strconv.FormatInt(int64(v+0.5), 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
