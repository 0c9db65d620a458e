package triage

import (
	"fmt"
	"testing"
	"time"

	"github.com/autocapture/autocapture/capture/internal/exposition"
	"github.com/autocapture/autocapture/capture/scrape"
	"github.com/autocapture/autocapture/vllmsim"
	"github.com/autocapture/autocapture/vocab"
)

// onsetAlert is each cause's shipped alert condition, evaluated as the rules
// shortened for tests do (deploy.AlertRules(30s, 0s)): over the last rule
// window, from the instance's own metrics. It says whether the alert can fire.
var onsetAlert = map[string]func(w scrape.Delta) bool{
	vllmsim.ScenarioOverload: func(w scrape.Delta) bool {
		v, ok := w.Cur.Value(exposition.VMWaiting, exposition.AggMax, nil)
		return ok && v > 10
	},
	vllmsim.ScenarioKVPressure: func(w scrape.Delta) bool {
		v, ok := w.Cur.Value(exposition.VMKVUsage, exposition.AggMax, nil)
		return ok && v > 0.95
	},
	vllmsim.ScenarioPrefillBound: func(w scrape.Delta) bool { return ruleQuantile(w, exposition.VMTTFT) > 2 },
	vllmsim.ScenarioDecodeBound:  func(w scrape.Delta) bool { return ruleQuantile(w, exposition.VMITL) > 0.2 },
	vllmsim.ScenarioUnexplained:  func(w scrape.Delta) bool { return ruleQuantile(w, exposition.VMITL) > 0.2 },
	vllmsim.ScenarioClientAborts: func(w scrape.Delta) bool {
		all, _ := w.Rate(exposition.VMFinished, nil)
		ab, _ := w.Rate(exposition.VMFinished, func(ls map[string]string) bool { return ls["finished_reason"] == exposition.FinishedReasonAbort })
		return all > 0.05 && ab/all > 0.05
	},
}

// ruleQuantile is the p99 the latency alerts compute (histogram_quantile over
// the window, no minimum count), 0 when the window has too little traffic.
func ruleQuantile(w scrape.Delta, m exposition.Metric) float64 {
	all, _ := w.Rate(exposition.VMFinished, nil)
	h, ok := w.Hist(m)
	if !ok || h.Count == 0 || all <= 0.05 {
		return 0
	}
	v, _ := h.Quantile(0.99)
	return v
}

// TestTriageAtOnset: an instance healthy for three minutes shifts to a cause
// (Sim.Shift); the moment that cause's alert can first fire (short rule
// windows, `for: 0s`), triage reads the shipped playbook's sources as they
// are then: a snapshot over the last 2 minutes (PromQL's rate windows,
// emulated by two scrapes 2 minutes apart, so its lifecycle histograms are
// mostly the healthy minutes and the stuck requests are not in them), then
// the scrape step over its gap. It triages twice: with the snapshot's
// baselines (the 2 healthy minutes up to the shift, as the shipped playbooks
// read them) and without (Prometheus has no past of this instance). Both
// verdicts must name the cause, on both metric generations, and their
// evidence never call a deep queue normal.
func TestTriageAtOnset(t *testing.T) {
	t.Parallel() // waits on real time and a Prometheus of its own
	seeds := []uint64{7}
	for s := 1; s < *scrapeSeeds; s++ {
		seeds = append(seeds, uint64(s))
	}
	const healthyFor = 180
	for _, seed := range seeds {
		for _, legacy := range nameVariants() {
			for cause, fires := range onsetAlert {
				name := fmt.Sprintf("%s/seed%d", cause, seed)
				if legacy {
					name += "/legacy"
				}
				t.Run(name, func(t *testing.T) {
					h := newSimHistory(t, vllmsim.Options{Scenario: vllmsim.ScenarioHealthy, Seed: seed, LegacyMetrics: legacy, Start: time.Unix(1.8e9, 0)})
					if err := h.sim.Shift(cause, healthyFor*time.Second); err != nil {
						t.Fatal(err)
					}
					h.tick(healthyFor)
					if st := h.sim.State(); st.Scenario != cause {
						t.Fatalf("at %d s: scenario %s, want the shift to %s", healthyFor, st.Scenario, cause)
					}
					since := 0
					for !fires(h.over(30, 0)) {
						h.tick(1)
						if since++; since > 120 {
							t.Fatalf("%s: the alert did not fire within 2 minutes of the shift", cause)
						}
					}
					withPast, noPast := h.snapshot(120, since), h.snapshot(0, 0)
					scraped := h.scrape()
					for _, snap := range []*vocab.Result{withPast, noPast} {
						v, sig := h.triage(snap, scraped, Config{})
						t.Logf("fired %d s after the shift: %s %v basis %v\n%q", since, v.ID, v.Contributing, v.Basis, v.Evidence)
						if v.ID != cause {
							t.Fatalf("verdict %s %v, want %s\nsnapshot %v\nscrape %v\nevidence %q", v.ID, v.Contributing, cause,
								snap.Signals, scraped.Signals, v.Evidence)
						}
						checkEvidenceAgainstSignals(t, sig, DefaultThresholds, v)
					}
				})
			}
		}
	}
}

// nameVariants are the metric generations a simulation runs under: current
// and legacy names, or only the current ones in the quick loop (-short),
// where the legacy run repeats the same simulation.
func nameVariants() []bool {
	if testing.Short() {
		return []bool{false}
	}
	return []bool{false, true}
}
