package capture_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/autocapture/autocapture/capture/internal/views"
	"github.com/autocapture/autocapture/vllmsim"
	"github.com/autocapture/autocapture/vocab"
)

// BenchmarkPeers runs the shipped snapshot alone, then the snapshot and the
// shipped peers step in parallel (tier 1 as the runner runs it), for one
// overloaded instance among 4 and 16 instances of one model on a real
// Prometheus, and reports the wall times, their ratio (the target:
// with/without <= 1.2) and the peers step's queries per run (constant in the
// fleet's size: one per signal).
//
//	go test -bench Peers -run '^$' ./capture
func BenchmarkPeers(b *testing.B) {
	for _, n := range []int{4, 16} {
		b.Run(fmt.Sprintf("instances=%d", n), func(b *testing.B) {
			fleet := []simInstance{{model: "m", scenario: vllmsim.ScenarioOverload}}
			for len(fleet) < n {
				fleet = append(fleet, simInstance{model: "m", scenario: vllmsim.ScenarioHealthy})
			}
			insts, promURL, peerQueries := fleetUnderPrometheus(b, fleet)
			env := promEnv(b, promURL)
			plan, alert := queueDeepPlan(b, insts[0], "m")
			steps := map[string]vocab.Step{}
			for _, ps := range plan.Steps {
				if ps.ID == "snapshot" || ps.ID == "peers" {
					steps[ps.ID] = ps.Step
				}
			}
			var seq atomic.Int64 // a run id per step run: artifacts are written once per key
			run := func(id string) time.Duration {
				in := &vocab.Input{RunID: fmt.Sprintf("bench-%d", seq.Add(1)), StepID: id, Alert: alert, Env: env,
					Window: vocab.Window{Start: time.Now().Add(-10 * time.Minute), End: time.Now()}}
				t0 := time.Now()
				res, err := steps[id].Run(context.Background(), in)
				took := time.Since(t0)
				if err != nil || res.Findings["failed"] != nil {
					b.Errorf("%s: err %v, failed %v", id, err, res.Findings["failed"])
				}
				if pv, ok := res.Findings[views.FindingPeers].(*views.PeerView); ok && len(pv.Instances) != n {
					b.Errorf("peers saw %d instances, want %d", len(pv.Instances), n)
				}
				return took
			}
			var snapAlone, peers, tier1 time.Duration
			var queries int64
			runs := 0
			for b.Loop() {
				snapAlone += run("snapshot")
				// Tier 1 as the runner runs it: the snapshot and the peers step in parallel.
				before := peerQueries.Load()
				t0 := time.Now()
				var wg sync.WaitGroup
				wg.Go(func() { run("snapshot") })
				wg.Go(func() { peers += run("peers") })
				wg.Wait()
				tier1 += time.Since(t0)
				queries += peerQueries.Load() - before
				runs++
			}
			ms := func(d time.Duration) float64 { return d.Seconds() * 1000 / float64(runs) }
			b.ReportMetric(ms(snapAlone), "snapshot-ms/op")
			b.ReportMetric(ms(peers), "peers-ms/op")
			b.ReportMetric(ms(tier1), "snapshot+peers-ms/op")
			b.ReportMetric(tier1.Seconds()/snapAlone.Seconds(), "with/without")
			b.ReportMetric(float64(queries)/float64(runs), "peers-queries/op")
		})
	}
}
