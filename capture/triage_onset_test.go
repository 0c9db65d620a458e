package capture

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/autocapture/autocapture/vllmsim"
)

// onsetAlert is each cause's shipped alert condition, evaluated as the rules
// shortened for tests do (deploy.AlertRules(30s, 0s)): over the last rule
// window, from the instance's own metrics. It says whether the alert can fire.
var onsetAlert = map[string]func(w scrapeDelta) bool{
	vllmsim.ScenarioOverload: func(w scrapeDelta) bool {
		v, ok := w.cur.value(vmWaiting, aggMax, nil)
		return ok && v > 10
	},
	vllmsim.ScenarioKVPressure: func(w scrapeDelta) bool {
		v, ok := w.cur.value(vmKVUsage, aggMax, nil)
		return ok && v > 0.95
	},
	vllmsim.ScenarioPrefillBound: func(w scrapeDelta) bool { return ruleQuantile(w, vmTTFT) > 2 },
	vllmsim.ScenarioDecodeBound:  func(w scrapeDelta) bool { return ruleQuantile(w, vmITL) > 0.2 },
	vllmsim.ScenarioUnexplained:  func(w scrapeDelta) bool { return ruleQuantile(w, vmITL) > 0.2 },
	vllmsim.ScenarioClientAborts: func(w scrapeDelta) bool {
		all, _ := w.rate(vmFinished, nil)
		ab, _ := w.rate(vmFinished, func(ls map[string]string) bool { return ls["finished_reason"] == finishedReasonAbort })
		return all > 0.05 && ab/all > 0.05
	},
}

// ruleQuantile is the p99 the latency alerts compute (histogram_quantile over
// the window, no minimum count), 0 when the window has too little traffic.
func ruleQuantile(w scrapeDelta, m vllmMetric) float64 {
	all, _ := w.rate(vmFinished, nil)
	h, ok := w.hist(m)
	if !ok || h.count == 0 || all <= 0.05 {
		return 0
	}
	v, _ := h.quantile(0.99)
	return v
}

// TestTriageAtOnset: an instance healthy for three minutes switches to a
// cause; the moment that cause's alert can first fire (short rule windows,
// `for: 0s`), triage reads the shipped playbook's sources as they are then: a
// snapshot over the last 2 minutes (PromQL's rate windows, emulated by two
// scrapes 2 minutes apart, so its lifecycle histograms are mostly the healthy
// minutes and the stuck requests are not in them), then the scrape step over
// its gap. The verdict must name the cause, on both metric generations, and its
// evidence never call a deep queue normal.
func TestTriageAtOnset(t *testing.T) {
	seeds := []uint64{7}
	for s := 1; s < *scrapeSeeds; s++ {
		seeds = append(seeds, uint64(s))
	}
	for _, seed := range seeds {
		for _, legacy := range []bool{false, true} {
			for cause, fires := range onsetAlert {
				name := fmt.Sprintf("%s/seed%d", cause, seed)
				if legacy {
					name += "/legacy"
				}
				t.Run(name, func(t *testing.T) {
					sim, err := vllmsim.New(vllmsim.Options{Scenario: vllmsim.ScenarioHealthy, Seed: seed, LegacyMetrics: legacy, Start: time.Unix(1.8e9, 0)})
					if err != nil {
						t.Fatal(err)
					}
					srv := httptest.NewServer(sim.Handler())
					defer srv.Close()
					step, _ := NewScrape(ScrapeConfig{Gap: 10 * time.Second})
					get := func() *sample {
						resp, err := srv.Client().Get(srv.URL + "/metrics")
						if err != nil {
							t.Fatal(err)
						}
						defer resp.Body.Close()
						b, _ := io.ReadAll(resp.Body)
						return step.sampleOf(b, sim.Now())
					}
					// One scrape a second, as the test Prometheus does.
					var hist []*sample
					tick := func() {
						sim.Advance(time.Second)
						hist = append(hist, get())
					}
					for range 180 {
						tick()
					}
					if err := sim.SetScenario(cause); err != nil {
						t.Fatal(err)
					}
					since := len(hist)
					for {
						tick()
						n := len(hist)
						rule := scrapeDelta{prev: &hist[n-31].exp, cur: hist[n-1].exp, gap: 30 * time.Second}
						if fires(rule) {
							break
						}
						if n-since > 120 {
							t.Fatalf("%s: the alert did not fire within 2 minutes of the switch", cause)
						}
					}
					n := len(hist)
					firedAfter := time.Duration(n-since) * time.Second
					snap := scrapeDelta{prev: &hist[n-121].exp, cur: hist[n-1].exp, gap: 2 * time.Minute}
					snapshot := &Result{Signals: snap.signals(), Findings: map[string]any{"source": SourcePromQL,
						FindingSignalWindows: snap.windows(snap.signals()), FindingSignalsAt: sim.Now().UTC().Format(time.RFC3339Nano)}}
					in, _ := scrapeInput(t, srv)
					in.Env.Now = sim.Now
					step.sleep = func(_ context.Context, d time.Duration) error { sim.Advance(d); return nil }
					scraped, err := step.Run(context.Background(), in)
					if err != nil {
						t.Fatal(err)
					}
					tri, _ := NewTriage(TriageConfig{From: []string{"snapshot", "scrape"}})
					out, err := tri.Run(context.Background(), &Input{Env: &Env{Now: sim.Now},
						Prior: map[string]*Result{"snapshot": snapshot, "scrape": scraped}})
					if err != nil {
						t.Fatal(err)
					}
					v := out.Verdict
					t.Logf("fired %s after the switch: %s %v\n%q", firedAfter, v.ID, v.Contributing, v.Evidence)
					if v.ID != cause {
						t.Fatalf("verdict %s %v, want %s\nsnapshot %v\nscrape %v\nevidence %q", v.ID, v.Contributing, cause,
							snapshot.Signals, scraped.Signals, v.Evidence)
					}
					checkEvidenceAgainstSignals(t, out.Signals, DefaultThresholds, v)
				})
			}
		}
	}
}
