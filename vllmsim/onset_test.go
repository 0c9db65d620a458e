package vllmsim

import (
	"testing"
	"time"
)

// TestOnsetLifecycleHistogramsLag: at an incident's onset vLLM's gauges move
// at once while its lifecycle histograms lag, because a request is observed
// in request_queue_time_seconds (and e2e, prefill, decode, inference) only
// when it finishes. Triage reads both, so the sim must reproduce the lag: 10
// s after a shift from healthy to overload (Sim.Shift) the waiting gauge is deep, yet
// the queue-time histogram has counted exactly the requests that finished
// (under half of those that arrived, none of the waiting ones) and reads a
// queue time far below what the waiting requests have already waited; a
// minute later it has caught up.
func TestOnsetLifecycleHistogramsLag(t *testing.T) {
	const queueHist = "vllm:request_queue_time_seconds"
	for seed := uint64(1); seed <= 4; seed++ {
		s, err := New(Options{Scenario: ScenarioHealthy, Seed: seed, Start: shiftStart})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Shift(ScenarioOverload, time.Minute); err != nil {
			t.Fatal(err)
		}
		s.Advance(time.Minute)
		st := s.State()
		if st.Scenario != ScenarioOverload || st.Waiting > 3 {
			t.Fatalf("seed %d: at the shift: %s, waiting %d", seed, st.Scenario, st.Waiting)
		}
		inBefore := st.Waiting + st.Running
		before := takeSnapshot(t, s)

		s.Advance(10 * time.Second)
		after := takeSnapshot(t, s)
		st = s.State()
		window := after.hist(queueHist).minus(before.hist(queueHist))
		counted := window.counts[len(window.counts)-1]
		finished := 0
		for _, r := range s.Requests() {
			if r.Finished.After(shiftStart.Add(time.Minute)) {
				finished++
			}
		}
		arrived := finished + st.Waiting + st.Running - inBefore
		s.mu.Lock()
		var waitedSum, oldest float64
		for _, r := range s.eng.waiting {
			w := (s.eng.now - r.arrival).Seconds()
			waitedSum += w
			oldest = max(oldest, w)
		}
		waitedMean := waitedSum / float64(len(s.eng.waiting))
		s.mu.Unlock()
		gauge := after.value("vllm:num_requests_waiting", "", "")
		observedMean := window.sum / counted
		p50 := window.quantile(0.5)
		t.Logf("seed %d, 10 s after the shift: waiting gauge %.0f; %d arrived, %d finished, histogram +%.0f; observed queue mean %.2f s, p50 %.2f s; the waiting have waited %.2f s on average, %.2f s at most",
			seed, gauge, arrived, finished, counted, observedMean, p50, waitedMean, oldest)

		if gauge < 5*alertQueue {
			t.Errorf("seed %d: waiting gauge %.0f: not deep 10 s into overload", seed, gauge)
		}
		if counted != float64(finished) {
			t.Errorf("seed %d: the queue-time histogram counted %.0f requests, %d finished: it must count at finish only", seed, counted, finished)
		}
		if counted >= float64(arrived)/2 {
			t.Errorf("seed %d: histogram counted %.0f of %d arrivals: no lag", seed, counted, arrived)
		}
		if observedMean > waitedMean/3 || p50 > waitedMean/4 {
			t.Errorf("seed %d: observed queue time mean %.2f / p50 %.2f s already near what the waiting have waited (mean %.2f, max %.2f s)",
				seed, observedMean, p50, waitedMean, oldest)
		}

		// A minute later the finished requests are the ones that queued
		// behind the onset: the histogram has caught up.
		s.Advance(time.Minute)
		late := takeSnapshot(t, s)
		caught := late.hist(queueHist).minus(after.hist(queueHist)).quantile(0.5)
		t.Logf("seed %d: queue time p50 over the next minute %.2f s", seed, caught)
		if caught < 10 || caught < 5*p50 {
			t.Errorf("seed %d: the queue-time histogram never caught up: p50 %.2f s after %.2f s at onset", seed, caught, p50)
		}
	}
}
