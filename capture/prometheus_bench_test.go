package capture

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/autocapture/autocapture/capture/prometheus"
	"github.com/autocapture/autocapture/vllmsim"
	"github.com/autocapture/autocapture/vocab"
)

// BenchmarkTier1 runs the tier-1 PromQL snapshot (8 queries, one step) against a
// real Prometheus scraping the stand-in vLLM, and reports the step's wall time
// next to its slowest single query: queries run in parallel, so the step should
// cost its slowest query (target wall/slowest <= 1.2), not the sum.
//
//	go test ./capture -run '^$' -bench Tier1 -benchtime 50x
func BenchmarkTier1(b *testing.B) {
	inst, prom := simUnderPrometheus(b, vllmsim.ScenarioOverload, false)
	qs := snapshotQueries(inst)[:8]
	step, err := prometheus.New(prometheus.Config{Queries: qs})
	if err != nil {
		b.Fatal(err)
	}
	in := promInput(b, prom.URL)
	var wall, slowest, sum float64
	n := 0
	for b.Loop() {
		in.Window = vocab.Window{Start: time.Now().Add(-10 * time.Minute), End: time.Now()}
		in.RunID = fmt.Sprintf("bench-tier1-%d", n) // artifacts are written once per key
		res, err := step.Run(context.Background(), in)
		if err != nil || res.Findings["failed"] != nil {
			b.Fatalf("err %v, failed %v", err, res.Findings["failed"])
		}
		w, s, total := stepTimings(b, in, res)
		wall, slowest, sum, n = wall+w, slowest+s, sum+total, n+1
	}
	b.ReportMetric(1000*wall/float64(n), "wall-ms/op")
	b.ReportMetric(1000*slowest/float64(n), "slowest-query-ms/op")
	b.ReportMetric(1000*sum/float64(n), "sum-of-queries-ms/op")
	b.ReportMetric(wall/slowest, "wall/slowest")
}

// stepTimings reads the step's wall time and its queries' durations back from
// its JSON artifact.
func stepTimings(tb testing.TB, in *vocab.Input, res *vocab.Result) (wall, slowest, sum float64) {
	tb.Helper()
	rc, err := in.Env.Store.Open(context.Background(), res.Artifacts[0].Key)
	if err != nil {
		tb.Fatal(err)
	}
	defer rc.Close()
	body, _ := io.ReadAll(rc)
	var a struct {
		Wall    float64 `json:"wall_s"`
		Queries []struct {
			Duration float64 `json:"duration_s"`
		} `json:"queries"`
	}
	if err := json.Unmarshal(body, &a); err != nil {
		tb.Fatal(err)
	}
	for _, q := range a.Queries {
		slowest = max(slowest, q.Duration)
		sum += q.Duration
	}
	return a.Wall, slowest, sum
}
