package vllmsim

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The shipped alert thresholds (deploy/ rules use exactly these).
const (
	alertTTFT  = 2.0  // p99 TTFT, seconds
	alertITL   = 0.2  // p99 inter-token latency, seconds
	alertQueue = 10.0 // num_requests_waiting
	alertKV    = 0.95 // KV usage
	alertAbort = 0.05 // aborts / finished
)

// run measures a scenario in virtual time: the first 20 s after load start
// (when the alerts must have crossed) and the 60 s after (steady state).
func run(t *testing.T, scenario string) (early, steady signals) {
	t.Helper()
	s, err := New(Options{Scenario: scenario, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	early = measure(t, s, 20*time.Second)
	steady = measure(t, s, 60*time.Second)
	t.Logf("0–20 s   %v", early)
	t.Logf("20–80 s  %v", steady)
	return early, steady
}

// check fails the test with what when ok is false.
func check(t *testing.T, ok bool, what string, args ...any) {
	t.Helper()
	if !ok {
		t.Errorf("symptom missing: "+what, args...)
	}
}

// TestScenarioSymptoms runs every scenario in virtual time and asserts the
// symptoms a vLLM operator would see: the alerts each one must fire within
// 20 s, and the signals that tell it apart from the others.
func TestScenarioSymptoms(t *testing.T) {
	_, healthy := run(t, ScenarioHealthy)
	t.Run(ScenarioHealthy, func(t *testing.T) {
		h := healthy
		check(t, h.TTFTp99 < alertTTFT/2, "healthy p99 TTFT %.3f not well under %v", h.TTFTp99, alertTTFT)
		check(t, h.ITLp99 < alertITL*0.6, "healthy p99 ITL %.3f not well under %v", h.ITLp99, alertITL)
		check(t, h.WaitingMax < alertQueue/2, "healthy queue reached %v", h.WaitingMax)
		check(t, h.KVMax < 0.5, "healthy KV reached %.2f", h.KVMax)
		check(t, h.AbortRatio == 0 && h.PreemptRate == 0, "healthy aborts %.2f, preemptions %.2f/s", h.AbortRatio, h.PreemptRate)
	})
	t.Run(ScenarioOverload, func(t *testing.T) {
		e, s := run(t, ScenarioOverload)
		check(t, e.WaitingMax > alertQueue && e.TTFTp99 > alertTTFT, "queue %v and p99 TTFT %.2f within 20 s", e.WaitingMax, e.TTFTp99)
		check(t, s.RunningMean >= 0.95*float64(DefaultEngine.MaxNumSeqs), "batch not full: %.1f", s.RunningMean)
		check(t, s.QueueP50 > 2*e.QueueP50 && s.TTFTp50 > 2*e.TTFTp50, "queue time and TTFT not growing: %.2f→%.2f, %.2f→%.2f", e.QueueP50, s.QueueP50, e.TTFTp50, s.TTFTp50)
		check(t, s.PrefillP99 <= 2*healthy.PrefillP99, "prefill not flat: %.2f vs healthy %.2f", s.PrefillP99, healthy.PrefillP99)
		check(t, s.DecodeP50 <= 2*healthy.DecodeP50, "decode not flat: %.2f vs healthy %.2f", s.DecodeP50, healthy.DecodeP50)
		check(t, s.ITLp99 < alertITL && s.KVMax < 0.8 && s.PreemptRate == 0, "ITL %.3f, KV %.2f, preemptions %.2f/s", s.ITLp99, s.KVMax, s.PreemptRate)
	})
	t.Run(ScenarioKVPressure, func(t *testing.T) {
		e, s := run(t, ScenarioKVPressure)
		check(t, e.KVMax > alertKV && e.PreemptRate > 0, "KV %.2f and preemptions %.2f/s within 20 s", e.KVMax, e.PreemptRate)
		check(t, s.KVMean > 0.9 && s.PreemptRate > 0.5, "steady KV %.2f, preemptions %.2f/s", s.KVMean, s.PreemptRate)
		check(t, s.WaitingMax < alertQueue && s.ITLp99 < alertITL, "queue %v, ITL %.3f", s.WaitingMax, s.ITLp99)
	})
	t.Run(ScenarioPrefillBound, func(t *testing.T) {
		e, s := run(t, ScenarioPrefillBound)
		check(t, e.TTFTp99 > alertTTFT, "p99 TTFT %.2f within 20 s", e.TTFTp99)
		check(t, s.PrefillP50 > 5*healthy.PrefillP50, "prefill %.2f vs healthy %.2f", s.PrefillP50, healthy.PrefillP50)
		check(t, s.PromptMean > 4*healthy.PromptMean, "prompts %.0f vs healthy %.0f", s.PromptMean, healthy.PromptMean)
		check(t, s.WaitingMax < alertQueue && s.ITLp99 < alertITL, "queue %v, ITL %.3f", s.WaitingMax, s.ITLp99)
		check(t, s.KVMax < 0.8 && s.PreemptRate == 0, "KV %.2f, preemptions %.2f/s", s.KVMax, s.PreemptRate)
	})
	t.Run(ScenarioDecodeBound, func(t *testing.T) {
		e, s := run(t, ScenarioDecodeBound)
		check(t, e.ITLp99 > alertITL, "p99 ITL %.3f within 20 s", e.ITLp99)
		check(t, s.RunningMean > 10*healthy.RunningMean, "batch %.0f vs healthy %.0f", s.RunningMean, healthy.RunningMean)
		check(t, s.ITLp50 > 3*healthy.ITLp50, "ITL p50 %.3f vs healthy %.3f", s.ITLp50, healthy.ITLp50)
		check(t, s.WaitingMax < alertQueue && s.TTFTp99 < alertTTFT, "queue %v, TTFT %.2f", s.WaitingMax, s.TTFTp99)
		check(t, s.KVMax < alertKV && s.PreemptRate == 0, "KV %.2f, preemptions %.2f/s", s.KVMax, s.PreemptRate)
	})
	t.Run(ScenarioClientAborts, func(t *testing.T) {
		e, s := run(t, ScenarioClientAborts)
		check(t, e.AbortRatio > alertAbort, "abort ratio %.2f within 20 s", e.AbortRatio)
		check(t, s.AbortRatio > alertAbort, "steady abort ratio %.2f", s.AbortRatio)
		check(t, s.WaitingMax < alertQueue && s.TTFTp99 < alertTTFT && s.ITLp99 < alertITL, "queue %v, TTFT %.2f, ITL %.3f", s.WaitingMax, s.TTFTp99, s.ITLp99)
	})
	t.Run(ScenarioUnexplained, func(t *testing.T) {
		e, s := run(t, ScenarioUnexplained)
		check(t, e.ITLp99 > alertITL || e.TTFTp99 > alertTTFT, "ITL %.3f or TTFT %.2f within 20 s", e.ITLp99, e.TTFTp99)
		check(t, s.WaitingMax < alertQueue/2, "queue %v", s.WaitingMax)
		check(t, s.RunningMean < 1.5*healthy.RunningMean, "batch %.1f vs healthy %.1f", s.RunningMean, healthy.RunningMean)
		check(t, s.PromptMean > 0.7*healthy.PromptMean && s.PromptMean < 1.3*healthy.PromptMean, "prompts %.0f vs healthy %.0f", s.PromptMean, healthy.PromptMean)
		check(t, s.KVMax < 0.8 && s.PreemptRate == 0 && s.AbortRatio == 0, "KV %.2f, preemptions %.2f/s, aborts %.2f", s.KVMax, s.PreemptRate, s.AbortRatio)
	})
}

// TestSwitchScenarioAtRunTime: the same sim turns from healthy to overload
// and back; the queue follows.
func TestSwitchScenarioAtRunTime(t *testing.T) {
	s, err := New(Options{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	s.Advance(20 * time.Second)
	if w := s.State().Waiting; w > 3 {
		t.Fatalf("healthy queue %d", w)
	}
	if err := s.SetScenario(ScenarioOverload); err != nil {
		t.Fatal(err)
	}
	s.Advance(20 * time.Second)
	if w := s.State().Waiting; w <= alertQueue {
		t.Fatalf("overload queue %d after 20 s", w)
	}
	if err := s.SetScenario(ScenarioHealthy); err != nil {
		t.Fatal(err)
	}
	s.Advance(5 * time.Minute)
	if w := s.State().Waiting; w > 3 {
		t.Fatalf("queue %d did not drain after going back to healthy", w)
	}
	if err := s.SetScenario("nope"); err == nil {
		t.Fatal("unknown scenario accepted")
	}
}

// TestSeedDeterminism: the same seed and clock give the same requests,
// timings and trace ids; another seed does not.
func TestSeedDeterminism(t *testing.T) {
	start := time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)
	runOnce := func(seed uint64) []FinishedRequest {
		s, err := New(Options{Scenario: ScenarioClientAborts, Seed: seed, Start: start})
		if err != nil {
			t.Fatal(err)
		}
		s.Advance(30 * time.Second)
		return s.Requests()
	}
	a, b, c := runOnce(42), runOnce(42), runOnce(43)
	if len(a) == 0 || !reflect.DeepEqual(a, b) {
		t.Fatalf("same seed, different runs (%d vs %d requests)", len(a), len(b))
	}
	if reflect.DeepEqual(a, c) {
		t.Fatal("different seeds, same run")
	}
}

// TestFinishedRequestsAreConsistent: the lifecycle split adds up for every
// finished request, and the log is bounded.
func TestFinishedRequestsAreConsistent(t *testing.T) {
	s, err := New(Options{Scenario: ScenarioKVPressure, Seed: 5, MaxFinished: 20})
	if err != nil {
		t.Fatal(err)
	}
	s.Advance(90 * time.Second)
	reqs := s.Requests()
	if len(reqs) != 20 {
		t.Fatalf("kept %d finished requests, want the last 20", len(reqs))
	}
	const eps = 1e-9
	preempted := 0
	for _, r := range reqs {
		if r.Outcome == reasonAbort {
			continue
		}
		if d := r.Queue + r.Prefill - r.TTFT; d > eps || d < -eps {
			t.Errorf("%s: queue %.3f + prefill %.3f != TTFT %.3f", r.ID, r.Queue, r.Prefill, r.TTFT)
		}
		if d := r.TTFT + r.Decode - r.E2E; d > eps || d < -eps {
			t.Errorf("%s: TTFT %.3f + decode %.3f != e2e %.3f", r.ID, r.TTFT, r.Decode, r.E2E)
		}
		if r.TraceID == "" || r.Finished.Before(r.Arrival) {
			t.Errorf("%s: trace %q, arrival %v, finished %v", r.ID, r.TraceID, r.Arrival, r.Finished)
		}
		if r.Preemptions > 0 {
			preempted++
		}
	}
	if preempted == 0 {
		t.Error("kv-pressure finished no preempted request")
	}
}

// alertValue reads the value a shipped alert compares with its threshold.
func alertValue(g signals, alert string) float64 {
	return map[string]float64{"ttft": g.TTFTp99, "itl": g.ITLp99, "queue": g.WaitingMax, "kv": g.KVMax, "abort": g.AbortRatio}[alert]
}

var alertThreshold = map[string]float64{"ttft": alertTTFT, "itl": alertITL, "queue": alertQueue, "kv": alertKV, "abort": alertAbort}

// TestAlertsAcrossSeeds: for several seeds, every scenario fires the alerts
// its verdict expects within 20 s and never fires the ones that would
// confuse it with another verdict, over 80 s.
func TestAlertsAcrossSeeds(t *testing.T) {
	t.Parallel()
	expect := map[string]struct{ fire, quiet []string }{
		ScenarioHealthy:      {nil, []string{"ttft", "itl", "queue", "kv", "abort"}},
		ScenarioOverload:     {[]string{"ttft", "queue"}, []string{"itl", "kv"}},
		ScenarioKVPressure:   {[]string{"kv"}, []string{"itl", "queue", "abort"}},
		ScenarioPrefillBound: {[]string{"ttft"}, []string{"itl", "queue", "kv", "abort"}},
		ScenarioDecodeBound:  {[]string{"itl"}, []string{"ttft", "queue", "kv", "abort"}},
		ScenarioClientAborts: {[]string{"abort"}, []string{"ttft", "itl", "queue", "kv"}},
		ScenarioUnexplained:  {[]string{"itl"}, []string{"queue", "kv", "abort"}},
	}
	for name, want := range expect {
		for seed := uint64(1); seed <= 8; seed++ {
			s, err := New(Options{Scenario: name, Seed: seed})
			if err != nil {
				t.Fatal(err)
			}
			early := measure(t, s, 20*time.Second)
			steady := measure(t, s, 60*time.Second)
			for _, a := range want.fire {
				if v := alertValue(early, a); !(v > alertThreshold[a]) {
					t.Errorf("%s seed %d: %s = %v, not past %v within 20 s", name, seed, a, v, alertThreshold[a])
				}
			}
			for _, a := range want.quiet {
				for _, g := range []signals{early, steady} {
					if v := alertValue(g, a); v > alertThreshold[a] {
						t.Errorf("%s seed %d: %s = %v fired (threshold %v)", name, seed, a, v, alertThreshold[a])
					}
				}
			}
		}
	}
}

// TestSignalTable measures every scenario at its default load (seed 7, 80 s
// of virtual time) and logs the markdown table vllmsim/README.md carries:
// regenerate it with `go test ./vllmsim -run TestSignalTable -v`.
func TestSignalTable(t *testing.T) {
	var b strings.Builder
	b.WriteString("\n| scenario | alerts by 20 s | waiting mean / max | running mean | KV mean / max | preemptions/s | TTFT p50 / p99 | ITL p50 / p99 | queue time p50 / p99 | prefill p50 / p99 | decode p50 / p99 | prompt tokens (mean) | abort share |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, name := range []string{ScenarioHealthy, ScenarioOverload, ScenarioKVPressure, ScenarioPrefillBound,
		ScenarioDecodeBound, ScenarioClientAborts, ScenarioUnexplained} {
		s, err := New(Options{Scenario: name, Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		early := measure(t, s, 20*time.Second)
		g := measure(t, s, 60*time.Second)
		var fired []string
		for _, a := range []string{"ttft", "itl", "queue", "kv", "abort"} {
			if alertValue(early, a) > alertThreshold[a] {
				fired = append(fired, fmt.Sprintf("%s %.3g", a, alertValue(early, a)))
			}
		}
		if len(fired) == 0 {
			fired = []string{"none"}
		}
		fmt.Fprintf(&b, "| %s | %s | %.1f / %.0f | %.1f | %.2f / %.2f | %.2f | %.2f / %.2f s | %.3f / %.3f s | %.2f / %.2f s | %.2f / %.2f s | %.1f / %.1f s | %.0f | %.2f |\n",
			name, strings.Join(fired, ", "), g.WaitingMean, g.WaitingMax, g.RunningMean, g.KVMean, g.KVMax, g.PreemptRate,
			g.TTFTp50, g.TTFTp99, g.ITLp50, g.ITLp99, g.QueueP50, g.QueueP99, g.PrefillP50, g.PrefillP99,
			g.DecodeP50, g.DecodeP99, g.PromptMean, g.AbortRatio)
	}
	t.Log(b.String())
}

// TestITLGrowsWithBatchWidth: in decode-bound, inter-token latency is a
// function of batch width: more concurrent clients, a wider batch, a
// slower token.
func TestITLGrowsWithBatchWidth(t *testing.T) {
	prevITL, prevBatch := 0.0, 0.0
	for _, clients := range []int{30, 90, 160, 240} {
		s, err := New(Options{Scenario: ScenarioDecodeBound, Concurrency: clients, Seed: 4})
		if err != nil {
			t.Fatal(err)
		}
		s.Advance(40 * time.Second)
		g := measure(t, s, 30*time.Second)
		t.Logf("%3d clients: batch %.0f, ITL p50 %.3f", clients, g.RunningMean, g.ITLp50)
		if g.RunningMean <= prevBatch || g.ITLp50 <= prevITL {
			t.Errorf("%d clients: batch %.0f ITL %.3f, not above %.0f / %.3f", clients, g.RunningMean, g.ITLp50, prevBatch, prevITL)
		}
		prevITL, prevBatch = g.ITLp50, g.RunningMean
	}
}
