package triage

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/capture/scrape"
	"github.com/autocapture/autocapture/vllmsim"
	"github.com/autocapture/autocapture/vocab"
)

// simHistory drives a stand-in vLLM in simulated time and keeps one scrape of
// it per second, as the test Prometheus does, so a test can read any window
// of its past the way PromQL would (rates over two scrapes a window apart).
type simHistory struct {
	t    *testing.T
	sim  *vllmsim.Sim
	srv  *httptest.Server
	step *scrape.Step
	hist []scraped
}

// scraped is one second's exposition, parsed the first time a window reads
// it: a window reads two scrapes of hundreds, and parsing every one was most
// of these simulations' CPU. Serving /metrics leaves the sim as it was, so
// the samples are the same as when each was parsed as it came.
type scraped struct {
	body   []byte
	at     time.Time
	sample *scrape.Sample
}

func newSimHistory(t *testing.T, o vllmsim.Options) *simHistory {
	t.Helper()
	sim, err := vllmsim.New(o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(srv.Close)
	step, _ := scrape.New(scrape.Config{Gap: 10 * time.Second})
	h := &simHistory{t: t, sim: sim, srv: srv, step: step}
	h.tick(1)
	return h
}

// tick advances n seconds, one scrape a second.
func (h *simHistory) tick(n int) {
	for range n {
		if len(h.hist) > 0 {
			h.sim.Advance(time.Second)
		}
		resp, err := h.srv.Client().Get(h.srv.URL + "/metrics")
		if err != nil {
			h.t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		h.hist = append(h.hist, scraped{body: b, at: h.sim.Now()})
	}
}

// at is the scrape of second i, parsed.
func (h *simHistory) at(i int) *scrape.Sample {
	s := &h.hist[i]
	if s.sample == nil {
		s.sample = h.step.SampleOf(s.body, s.at)
	}
	return s.sample
}

// over is the delta over the window seconds ending ago seconds before now.
func (h *simHistory) over(window, ago int) scrape.Delta {
	n := len(h.hist) - 1 - ago
	if n-window < 0 {
		h.t.Fatalf("history of %d s: no window of %d s ending %d s ago", len(h.hist), window, ago)
	}
	return scrape.Delta{Prev: &h.at(n - window).Exp, Cur: h.at(n).Exp, Gap: time.Duration(window) * time.Second}
}

// snapshot is what the shipped PromQL snapshot reads now: its signals over
// the last 2 minutes and, when baseline > 0, every signal again over the
// baseline window ending gap seconds before the alert (ago), as
// <signal>_baseline.
func (h *simHistory) snapshot(baseline, gap int) *vocab.Result {
	d := h.over(120, 0)
	sig := d.Signals()
	windows := d.Windows(sig)
	if baseline > 0 {
		for k, v := range h.over(baseline, gap).Signals() {
			sig[vocab.BaselineOf(k, false)] = v
			windows[vocab.BaselineOf(k, false)] = float64(baseline)
		}
	}
	return &vocab.Result{Signals: sig, Findings: map[string]any{"source": vocab.SourcePromQL,
		vocab.FindingSignalWindows: windows, vocab.FindingSignalsAt: h.sim.Now().UTC().Format(time.RFC3339Nano)}}
}

// scrape runs the scrape step now, over its gap in simulated time.
func (h *simHistory) scrape() *vocab.Result {
	h.t.Helper()
	in, _ := scrapeInput(h.t, h.srv)
	in.Env.Now = h.sim.Now
	h.step.SetSleep(func(_ context.Context, d time.Duration) error { h.sim.Advance(d); return nil })
	scraped, err := h.step.Run(context.Background(), in)
	if err != nil {
		h.t.Fatal(err)
	}
	return scraped
}

// triage runs triage over the snapshot and the scrape, as the shipped
// playbooks do.
func (h *simHistory) triage(snapshot, scraped *vocab.Result, cfg Config) (*vocab.Verdict, vocab.Signals) {
	h.t.Helper()
	cfg.From = []string{"snapshot", "scrape"}
	tri, err := New(cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	out, err := tri.Run(context.Background(), &vocab.Input{Env: &vocab.Env{Now: h.sim.Now},
		Prior: map[string]*vocab.Result{"snapshot": snapshot, "scrape": scraped}})
	if err != nil {
		h.t.Fatal(err)
	}
	return out.Verdict, out.Signals
}

// dist is a prompt-length distribution for a shape.
func dist(mean, lo, hi float64) *vllmsim.DistShape {
	return &vllmsim.DistShape{Mean: new(mean), Min: new(lo), Max: new(hi), Sigma: new(0.3)}
}

// TestTriageJudgesPromptsAgainstTheInstancesPast scripts the two incidents
// absolute thresholds misjudge, through the sim's traffic-shape API
// (Sim.ShiftTo), and reads the snapshot with its baseline (the 5 minutes
// ending 1 minute before the alert) as the shipped playbooks do:
//
//   - chat prompts growing from ~300 to ~1,500 tokens at a steady 1.5 rps:
//     no absolute threshold is crossed (prompts under 2,000, prefill under
//     0.5 s, TTFT p99 under 2 s), so the thresholds alone call it healthy;
//     against the instance's past it is prefill-bound;
//   - a RAG service whose prompts were always ~6,000 tokens, then 4× its
//     traffic: the thresholds alone call its long prompts and slow prefill
//     the cause; against its past, prompts and prefill are as they always
//     were and the queue is overload.
//
// On both metric generations, over seeds (-seeds N).
func TestTriageJudgesPromptsAgainstTheInstancesPast(t *testing.T) {
	t.Parallel() // waits on real time and a Prometheus of its own
	cases := []struct {
		name          string
		before, after vllmsim.Shape
		settle        int // seconds from the shift to the alert
		want, wantAbs string
		line          string // an evidence line of the verdict against the past
	}{
		{"prompts 5x longer, no threshold crossed", vllmsim.Shape{RPS: new(0.8), PromptTokens: dist(300, 64, 1500)},
			vllmsim.Shape{RPS: new(0.8), PromptTokens: dist(1500, 600, 3000)}, 60,
			vocab.VerdictPrefillBound, vocab.VerdictHealthy, "longer than the 5m before the alert"},
		{"always-long prompts, then overload", vllmsim.Shape{RPS: new(0.4), PromptTokens: dist(6000, 5000, 7000)},
			vllmsim.Shape{RPS: new(1.6), PromptTokens: dist(6000, 5000, 7000)}, 90,
			vocab.VerdictOverload, vocab.VerdictPrefillBound, "queue"},
		// At onset: the alert the moment the change shows (the scrape's gap
		// is all after the shift, the snapshot's 2 minutes mostly before).
		{"prompts 5x longer, at onset", vllmsim.Shape{RPS: new(0.8), PromptTokens: dist(300, 64, 1500)},
			vllmsim.Shape{RPS: new(0.8), PromptTokens: dist(1500, 600, 3000)}, 5,
			vocab.VerdictPrefillBound, vocab.VerdictHealthy, "longer than the 5m before the alert"},
		{"always-long prompts, then overload, at onset", vllmsim.Shape{RPS: new(0.4), PromptTokens: dist(6000, 5000, 7000)},
			vllmsim.Shape{RPS: new(1.6), PromptTokens: dist(6000, 5000, 7000)}, 30,
			vocab.VerdictOverload, vocab.VerdictPrefillBound, "queue"},
	}
	seeds := []uint64{7}
	for s := 1; s < *scrapeSeeds; s++ {
		seeds = append(seeds, uint64(s))
	}
	for _, c := range cases {
		for _, seed := range seeds {
			for _, legacy := range nameVariants() {
				name := fmt.Sprintf("%s/seed%d", c.name, seed)
				if legacy {
					name += "/legacy"
				}
				t.Run(name, func(t *testing.T) {
					h := newSimHistory(t, vllmsim.Options{Scenario: vllmsim.ScenarioHealthy, Seed: seed, LegacyMetrics: legacy, Start: time.Unix(1.8e9, 0)})
					if err := h.sim.SetShape(c.before); err != nil {
						t.Fatal(err)
					}
					h.tick(420)
					if err := h.sim.ShiftTo(vllmsim.Change{Shape: &c.after}); err != nil {
						t.Fatal(err)
					}
					h.tick(c.settle)
					snap, abs := h.snapshot(300, c.settle+60), h.snapshot(0, 0)
					scraped := h.scrape()
					v, sig := h.triage(snap, scraped, Config{})
					t.Logf("%s %v basis %v\n%q", v.ID, v.Contributing, v.Basis, v.Evidence)
					if v.ID != c.want {
						t.Fatalf("verdict %s %v, want %s\nsignals %v\nevidence %q", v.ID, v.Contributing, c.want, sig, v.Evidence)
					}
					if v.Basis[vocab.SigPromptTokensNow] != vocab.BasisBefore {
						t.Errorf("basis %v: want prompt length judged against the window before", v.Basis)
					}
					if !containsLine(v.Evidence, c.line) {
						t.Errorf("evidence lacks %q: %q", c.line, v.Evidence)
					}
					checkEvidenceAgainstSignals(t, sig, DefaultThresholds, v)

					// The same moment without the instance's past: the
					// thresholds alone misjudge it, which is the point.
					va, _ := h.triage(abs, scraped, Config{})
					if va.ID == c.want || va.Basis[vocab.SigPromptTokensNow] != vocab.BasisAbsolute {
						t.Errorf("without baselines: verdict %s basis %v: the absolute thresholds alone should misjudge it (typically %s)\n%q", va.ID, va.Basis, c.wantAbs, va.Evidence)
					}
				})
			}
		}
	}
}

func containsLine(lines []string, sub string) bool {
	for _, l := range lines {
		if sub == "" || strings.Contains(l, sub) {
			return true
		}
	}
	return false
}
