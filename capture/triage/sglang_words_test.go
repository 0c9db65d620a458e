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

// TestSGLangExtrasAtZeroLeftToTheFindings: SGLang writes every scheduler
// gauge at each log point, so a server without speculative decoding or PD
// reports them at 0; the evidence line names only the figures that say
// something, and says nothing when none does.
func TestSGLangExtrasAtZeroLeftToTheFindings(t *testing.T) {
	sig := vocab.Signals{vocab.SigKVUsage: 0.99, vocab.SigQueueDepth: 2, vocab.SigRunning: 14}
	for _, tc := range []struct {
		name   string
		extras map[string]float64
		want   string // "" for no line
	}{
		{"some figures", map[string]float64{"spec_accept_rate": 0, "gen_throughput": 203, "pd_decode_transfer_queue": 0, "retracted_input_tokens_per_s": 1830},
			"sglang also reports: gen_throughput 203, retracted_input_tokens_per_s 1.83e+03"},
		{"only zeros", map[string]float64{"spec_accept_rate": 0, "grammar_queue": 0}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, _ := diagnose(sig, nil, Thresholds{}, true, beyond{dialect: dialectView{engine: vocab.EngineSGLang, extras: tc.extras}})
			var got string
			for _, l := range v.Evidence {
				if strings.HasPrefix(l, "sglang also reports") {
					got = l
				}
			}
			if got != tc.want {
				t.Errorf("extras line %q, want %q", got, tc.want)
			}
		})
	}
}

// TestAdviceNamesTheRunsEngine: the unexplained verdict's advice to check
// recent changes names the engine the run is about, never the other one.
func TestAdviceNamesTheRunsEngine(t *testing.T) {
	sig := vocab.Signals{vocab.SigTTFTP99: 5, vocab.SigQueueDepth: 0, vocab.SigRunning: 2, vocab.SigKVUsage: 0.1}
	for _, tc := range []struct{ engine, want, not string }{
		{vocab.EngineSGLang, "SGLang version", "vLLM"},
		{"", "vLLM version", "SGLang"},
	} {
		v, _ := diagnose(sig, nil, Thresholds{}, true, beyond{dialect: dialectView{engine: tc.engine}})
		if v.ID != vocab.VerdictUnexplained {
			t.Fatalf("engine %q: verdict %s, want unexplained: %v", tc.engine, v.ID, v.Evidence)
		}
		all := strings.Join(v.Advice, "\n")
		if !strings.Contains(all, "check recent changes: "+tc.want) || strings.Contains(all, tc.not) || strings.Contains(all, engineWord) {
			t.Errorf("engine %q: advice, want %q and no %q:\n%s", tc.engine, tc.want, tc.not, all)
		}
	}
}
