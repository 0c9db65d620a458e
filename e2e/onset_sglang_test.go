package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vllmsim"
	"github.com/autocapture/autocapture/vocab"
)

// onsetCauses are the causes the onset proofs shift each sim to: every
// verdict the engine's own metrics can name.
var onsetCauses = []string{
	vllmsim.ScenarioOverload, vllmsim.ScenarioKVPressure, vllmsim.ScenarioPrefillBound,
	vllmsim.ScenarioDecodeBound, vllmsim.ScenarioClientAborts, vllmsim.ScenarioUnexplained,
}

// TestSGLangVerdictAtOnsetPerShiftedCause is TestVerdictAtOnsetPerShiftedCause
// for SGLang servers: every sim shows SGLang's surface (vllmsim --engine
// sglang), serves healthy traffic first and shifts to its cause; the shipped
// SGLang rules (windows shortened, `for: 0s`) fire through the real
// Prometheus and Alertmanager, the shipped SGLang playbooks run, and the
// first run of each instance names its cause; the healthy instance fires
// nothing; tier 2 (traces) runs exactly when the verdict is unexplained and
// returns the sim's slowest requests from SGLang's spans (service "sglang")
// in the Jaeger the vLLM runs use. The verdicts speak SGLang (the scrape
// tells the engine and era; kv-pressure says retractions) and say "not
// measured" of nothing SGLang exposes. Beside them, in the same stack,
// servers of the v0.3.6–v0.4 era, whose families lack queue time, prefill
// time, retractions and the abort and request counters: sglang04Honest says
// what each cause may honestly give.
func TestSGLangVerdictAtOnsetPerShiftedCause(t *testing.T) {
	t.Parallel()
	now, old := sglangSuffix, sglangEraSuffix(vllmsim.SGLangEra04)
	scenarios := []string{vllmsim.ScenarioHealthy + now, vllmsim.ScenarioHealthy + old}
	var paging []string
	for _, c := range onsetCauses {
		scenarios = append(scenarios, c+now, c+old)
		paging = append(paging, c+now)
		if sglang04Pages(c) {
			paging = append(paging, c+old)
		}
	}
	o := runOnset(t, scenarios, paging)
	for _, sc := range scenarios {
		if st := o.s.Sims[sc].state(t); st.Engine != vllmsim.EngineSGLang {
			t.Fatalf("%s: the sim serves engine %q, want sglang", sc, st.Engine)
		}
	}

	t.Run("2026", func(t *testing.T) {
		var tally onsetTally
		for _, r := range o.every {
			sc := o.byAddr[r.Labels["instance"]]
			if !strings.HasSuffix(sc, now) || r == o.first[sc] || (r.Verdict == nil && r.Status == "skipped") {
				continue
			}
			cause, _ := simVariant(sc)
			line := fmt.Sprintf("%s: later run %s fired %.1f s after the shift → %s %v", sc, r.Alertname,
				r.StartsAt.Sub(o.shiftAt[sc]).Seconds(), verdictID(r), contributing(r))
			if !honestAtOnset(cause, r) {
				t.Errorf("%s, want %s\n%s", line, cause, describe(r))
				continue
			}
			t.Log(line)
		}
		for _, c := range onsetCauses {
			sc := c + now
			r := o.first[sc]
			if r == nil {
				t.Errorf("%s: no run; alerts firing now: %v", sc, o.s.Prom.Query(t, `ALERTS{alertstate="firing"}`))
				continue
			}
			if !strings.HasPrefix(r.Alertname, "SGLang") {
				t.Errorf("%s: fired %s, want one of the shipped SGLang rules", sc, r.Alertname)
			}
			pre := preliminary(r)
			tally.add(c, r, pre)
			line := onsetLine(sc, r, o.shiftAt[sc])
			if !honestAtOnset(c, r) {
				t.Errorf("%s, want %s\n%s", line, c, describe(r))
				continue
			}
			if pre == "" {
				t.Errorf("%s: no preliminary verdict recorded: %v", sc, r.Verdicts)
			}
			checkSGLangWords(t, sc, r, "2026", nil)
			checkTier2(t, o.s, r, o.s.Sims[sc]) // unexplained: SGLang's Req spans, from the stack's one Jaeger
			t.Logf("%s\n  evidence: %s", line, strings.Join(r.Verdict.Evidence, "\n  | "))
		}
		t.Log(tally.String())
	})

	t.Run(vllmsim.SGLangEra04, func(t *testing.T) {
		for _, c := range onsetCauses {
			sc := c + old
			r := o.first[sc]
			if r == nil {
				if sglang04Pages(c) {
					t.Errorf("%s: no run; alerts firing now: %v", sc, o.s.Prom.Query(t, `ALERTS{alertstate="firing"}`))
				} else {
					t.Logf("%s: no page, as expected: %s; the sim aborted %s of the requests finished since the shift",
						sc, sglang04Silent[c], abortShare(t, o.s.Sims[sc], o.shiftAt[sc]))
				}
				continue
			}
			line := onsetLine(sc, r, o.shiftAt[sc])
			if why := sglang04Honest(c, r); why != "" {
				t.Errorf("%s: %s\n%s", line, why, describe(r))
				continue
			}
			checkSGLangWords(t, sc, r, "v0.3.6-v0.4", sglang04Gaps)
			t.Log(line)
		}
		for _, r := range o.every {
			sc := o.byAddr[r.Labels["instance"]]
			cause, _ := simVariant(sc)
			if !strings.HasSuffix(sc, old) || r == o.first[sc] || (r.Verdict == nil && r.Status == "skipped") {
				continue
			}
			if why := sglang04Honest(cause, r); why != "" {
				t.Errorf("%s: later run: %s\n%s", sc, why, describe(r))
			}
		}
	})
}

// onsetLine is the figures of one first run: seconds from the shift to the
// alert, to the preliminary verdict and to the refined one.
func onsetLine(sc string, r *runs.Run, shift time.Time) string {
	at := map[string]string{runs.VerdictPreliminary: "-", runs.VerdictRefined: "-"}
	for _, v := range r.Verdicts {
		if at[v.Kind] == "-" {
			at[v.Kind] = fmt.Sprintf("%.1f s", v.At.Sub(shift).Seconds())
		}
	}
	return fmt.Sprintf("%s: %s fired %.1f s after the shift, preliminary %s at %s, refined %s %v at %s (run took %s)",
		sc, r.Alertname, r.StartsAt.Sub(shift).Seconds(), preliminary(r), at[runs.VerdictPreliminary],
		verdictID(r), contributing(r), at[runs.VerdictRefined], runTook(r))
}

// sglang04Gaps are the key signals of triage's evidence (those it says "not
// measured" of when absent) a v0.3.6–v0.4 SGLang server has no series for
// (SGLANG.md §2, §4): no stage histograms, no retraction counter, no abort
// or request counter. (Its missing queue-time histogram is no key signal:
// triage says nothing of it on either engine.)
var sglang04Gaps = []string{vocab.SigPrefillMean, vocab.SigPreemptionsRate, vocab.SigAbortRatio}

// sglang04Silent are the causes a v0.3.6–v0.4 server cannot page for, and why.
var sglang04Silent = map[string]string{
	vllmsim.ScenarioClientAborts: "v0.3.6–v0.4 counts no aborts and no requests (SGLangHighAbortRatio reads num_aborted_requests_total / num_requests_total)",
}

func sglang04Pages(cause string) bool { return sglang04Silent[cause] == "" }

// sglang04Honest says what is wrong with a v0.3.6–v0.4 run for an instance
// whose cause is cause ("" if nothing): the cause, where the era's families
// show it. A cause they cannot show (sglang04Silent) may page by another
// symptom; its verdict must then name no other cause (only unexplained or
// healthy) and say which signal the era does not expose.
func sglang04Honest(cause string, r *runs.Run) string {
	if honestAtOnset(cause, r) {
		return ""
	}
	if sglang04Pages(cause) {
		return fmt.Sprintf("verdict %s %v, want %s", verdictID(r), contributing(r), cause)
	}
	switch id := verdictID(r); {
	case id != vocab.VerdictUnexplained && id != vocab.VerdictHealthy:
		return fmt.Sprintf("verdict %s %v: a cause the era cannot show (%s) must not be named another", id, contributing(r), cause)
	case !strings.Contains(strings.Join(r.Verdict.Evidence, "\n"), vocab.SigAbortRatio+": not exposed by SGLang"):
		return fmt.Sprintf("verdict %s does not say the abort ratio is not exposed", id)
	}
	return ""
}

// checkSGLangWords holds a run's evidence to SGLang's dialect: the scrape
// told SGLang and its era, no line names a vLLM family or says preemption
// (SGLang says retraction; the canonical signal name preemptions_per_s
// aside), SGLang's extra figures are those not at 0 (a server without
// speculative decoding or PD writes those gauges at 0), a kv-pressure
// verdict that measured retractions speaks of them, every key signal the
// era lacks (gaps) is said not exposed, and "not measured" names none of
// them, nor anything at all on a 2026 server, which exposes every key signal
// triage reads.
func checkSGLangWords(t *testing.T, sc string, r *runs.Run, era string, gaps []string) {
	t.Helper()
	if st := stepByKind(r, "scrape"); st == nil {
		t.Errorf("%s: no scrape step", sc)
	} else if st.Findings[vocab.FindingEngine] != vocab.EngineSGLang || st.Findings[vocab.FindingEra] != era {
		t.Errorf("%s: the scrape read engine %v era %v, want sglang %s (%s)", sc,
			st.Findings[vocab.FindingEngine], st.Findings[vocab.FindingEra], era, st.Summary)
	}
	if r.Verdict == nil {
		return
	}
	ev := strings.Join(r.Verdict.Evidence, "\n")
	if strings.Contains(ev, "vllm:") {
		t.Errorf("%s: evidence names a vLLM family:\n%s", sc, ev)
	}
	if strings.Contains(strings.ReplaceAll(ev, vocab.SigPreemptionsRate, ""), "preempt") {
		t.Errorf("%s: evidence says preemption, vLLM's word (SGLang retracts):\n%s", sc, ev)
	}
	if r.Verdict.ID == vllmsim.ScenarioKVPressure && hasSignal(r, vocab.SigPreemptionsRate) != "" &&
		!strings.Contains(ev, "retraction") {
		t.Errorf("%s: kv-pressure evidence does not speak of retractions:\n%s", sc, ev)
	}
	for _, l := range r.Verdict.Evidence {
		if extras, ok := strings.CutPrefix(l, vocab.EngineSGLang+" also reports: "); ok {
			for _, x := range strings.Split(extras, ", ") {
				if strings.HasSuffix(x, " 0") {
					t.Errorf("%s: %q lists a figure at 0 (%s), which says nothing", sc, l, x)
				}
			}
		}
		if !strings.HasPrefix(l, "not measured") {
			continue
		}
		if len(gaps) == 0 {
			t.Errorf("%s: a 2026 SGLang server exposes every signal triage reads, yet %q", sc, l)
		}
		for _, g := range gaps {
			if strings.Contains(l, g) {
				t.Errorf("%s: %q says %s is not measured: SGLang %s does not expose it", sc, l, g, era)
			}
		}
	}
	for _, g := range gaps {
		if !strings.Contains(ev, g+": not exposed by SGLang") && hasSignal(r, g) == "" {
			t.Errorf("%s: no line says %s is not exposed by SGLang %s:\n%s", sc, g, era, ev)
		}
	}
}

// hasSignal names the step that measured signal sig in run r ("" if none).
func hasSignal(r *runs.Run, sig string) string {
	for _, st := range r.Steps {
		if _, ok := st.Signals[sig]; ok && st.Kind != "triage" {
			return st.ID
		}
	}
	return ""
}

// abortShare is the share of a sim's requests finished since t0 that were
// aborted, by the sim's own record: the cause was there for the era to miss.
func abortShare(t *testing.T, sm *sim, t0 time.Time) string {
	t.Helper()
	n, aborted := 0, 0
	for _, q := range sm.requests(t) {
		if q.Finished.Before(t0) {
			continue
		}
		n++
		if q.Outcome == "abort" {
			aborted++
		}
	}
	if n == 0 {
		t.Errorf("%s: no request finished since the shift", sm.Scenario)
		return "none"
	}
	if aborted == 0 {
		t.Errorf("%s: no request aborted since the shift: the cause never came", sm.Scenario)
	}
	return fmt.Sprintf("%d/%d", aborted, n)
}
