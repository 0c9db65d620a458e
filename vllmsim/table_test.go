package vllmsim

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

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
