package triage

import (
	"strings"
	"testing"

	"github.com/autocapture/autocapture/vocab"
)

// TestPreemptionSaidInTheEngineWords: the same full pool, read from a vLLM
// server and from an SGLang one, gives the same verdict, and its evidence
// says preemptions on vLLM and retractions on SGLang (SGLang's own word, the
// one its metrics and logs use), never the other engine's word.
func TestPreemptionSaidInTheEngineWords(t *testing.T) {
	for _, tc := range []struct {
		name, engine, want, not string
		rate                    float64
	}{
		{"vllm preempting", "", "2 preemptions/s", "retraction", 2},
		{"sglang retracting", vocab.EngineSGLang, "2 retractions/s", "preemption", 2},
		{"vllm at the ceiling", "", "no preemption in the window yet", "retraction", 0},
		{"sglang at the ceiling", vocab.EngineSGLang, "no retraction in the window yet", "preemption", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sig := vocab.Signals{vocab.SigKVUsage: 0.99, vocab.SigPreemptionsRate: tc.rate, vocab.SigQueueDepth: 2, vocab.SigRunning: 14}
			v, _ := diagnose(sig, nil, Thresholds{}, true, beyond{dialect: dialectView{engine: tc.engine}})
			if v.ID != vocab.VerdictKVPressure {
				t.Fatalf("verdict %s, want kv-pressure: %v", v.ID, v.Evidence)
			}
			ev := strings.Join(v.Evidence, "\n")
			if !strings.Contains(ev, tc.want) || strings.Contains(strings.ReplaceAll(ev, vocab.SigPreemptionsRate, ""), tc.not) {
				t.Errorf("evidence, want %q and no %q:\n%s", tc.want, tc.not, ev)
			}
		})
	}
}
