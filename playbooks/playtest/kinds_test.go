package playtest

import (
	"context"
	"fmt"

	"github.com/autocapture/autocapture/capture"
	"github.com/autocapture/autocapture/vocab"
)

// Test kinds: a metrics kind that would need Prometheus, and a triage kind that
// reads its inputs' signals like the real one.

type netConfig struct {
	Query string `yaml:"query"`
}

type netStep struct{}

func (netStep) Run(_ context.Context, in *vocab.Input) (*vocab.Result, error) {
	if in.Env == nil || in.Env.Prometheus == nil {
		return nil, vocab.Errorf(vocab.ReasonBadConfig, "no prometheus configured")
	}
	return &vocab.Result{Summary: "queried"}, nil
}

type judgeConfig struct{}

type judgeStep struct{}

func (judgeStep) Run(_ context.Context, in *vocab.Input) (*vocab.Result, error) {
	sig := vocab.Signals{}
	for _, r := range in.Prior {
		sig.Merge(r.Signals)
	}
	id := vocab.VerdictUnexplained
	if sig[vocab.SigKVUsage] >= 0.95 {
		id = vocab.VerdictKVPressure
	}
	return &vocab.Result{Summary: fmt.Sprintf("KV %.0f%% → %s", 100*sig[vocab.SigKVUsage], id),
		Verdict: &vocab.Verdict{ID: id}}, nil
}

func init() {
	capture.Register(vocab.Kind{Name: "ptnet", Tier: vocab.TierMetrics,
		Config: func() any { return &netConfig{} },
		Build:  func(any) (vocab.Step, error) { return netStep{}, nil }})
	capture.Register(vocab.Kind{Name: "ptjudge", Tier: vocab.TierTriage,
		Config: func() any { return &judgeConfig{} },
		Build:  func(any) (vocab.Step, error) { return judgeStep{}, nil }})
	capture.Register(vocab.Kind{Name: "ptslow", Tier: vocab.TierTraces,
		Config: func() any { return &netConfig{} },
		Build:  func(any) (vocab.Step, error) { return netStep{}, nil }})
}
