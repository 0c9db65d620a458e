package capture_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/autocapture/autocapture/capture"
	"github.com/autocapture/autocapture/vllmsim"
)

// BenchmarkPeers runs the shipped peers step next to the shipped snapshot
// for one overloaded instance among 4 and 16 instances of one model on a
// real Prometheus, and reports both wall times and the peers step's queries
// per run (constant in the fleet's size: one per signal).
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
			steps := map[string]capture.Step{}
			for _, ps := range plan.Steps {
				if ps.ID == "snapshot" || ps.ID == "peers" {
					steps[ps.ID] = ps.Step
				}
			}
			wall := map[string]time.Duration{}
			before := peerQueries.Load()
			runs := 0
			for b.Loop() {
				for _, id := range []string{"snapshot", "peers"} {
					in := &capture.Input{RunID: "bench", StepID: id, Alert: alert, Env: env,
						Window: capture.Window{Start: time.Now().Add(-10 * time.Minute), End: time.Now()}}
					t0 := time.Now()
					res, err := steps[id].Run(context.Background(), in)
					wall[id] += time.Since(t0)
					if err != nil || res.Findings["failed"] != nil {
						b.Fatalf("%s: err %v, failed %v", id, err, res.Findings["failed"])
					}
					if pv, ok := res.Findings[capture.FindingPeers].(*capture.PeerView); ok && len(pv.Instances) != n {
						b.Fatalf("peers saw %d instances, want %d", len(pv.Instances), n)
					}
				}
				runs++
			}
			b.ReportMetric(float64(wall["peers"].Milliseconds())/float64(runs), "peers-ms/op")
			b.ReportMetric(float64(wall["snapshot"].Milliseconds())/float64(runs), "snapshot-ms/op")
			b.ReportMetric(float64(peerQueries.Load()-before)/float64(runs), "peers-queries/op")
		})
	}
}
