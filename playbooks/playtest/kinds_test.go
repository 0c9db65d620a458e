package playtest

import (
	"context"
	"fmt"

	"github.com/autocapture/autocapture/capture"
)

// Test kinds: a metrics kind that would need Prometheus, and a triage kind that
// reads its inputs' signals like the real one.

type netConfig struct {
	Query string `yaml:"query"`
}

type netStep struct{}

func (netStep) Run(_ context.Context, in *capture.Input) (*capture.Result, error) {
	if in.Env == nil || in.Env.Prometheus == nil {
		return nil, capture.Errorf(capture.ReasonBadConfig, "no prometheus configured")
	}
	return &capture.Result{Summary: "queried"}, nil
}

type judgeConfig struct{}

type judgeStep struct{}

func (judgeStep) Run(_ context.Context, in *capture.Input) (*capture.Result, error) {
	sig := capture.Signals{}
	for _, r := range in.Prior {
		sig.Merge(r.Signals)
	}
	id := capture.VerdictUnexplained
	if sig[capture.SigKVUsage] >= 0.95 {
		id = capture.VerdictKVPressure
	}
	return &capture.Result{Summary: fmt.Sprintf("KV %.0f%% → %s", 100*sig[capture.SigKVUsage], id),
		Verdict: &capture.Verdict{ID: id}}, nil
}

func init() {
	capture.Register(capture.Kind{Name: "ptnet", Tier: capture.TierMetrics,
		Config: func() any { return &netConfig{} },
		Build:  func(any) (capture.Step, error) { return netStep{}, nil }})
	capture.Register(capture.Kind{Name: "ptjudge", Tier: capture.TierTriage,
		Config: func() any { return &judgeConfig{} },
		Build:  func(any) (capture.Step, error) { return judgeStep{}, nil }})
	capture.Register(capture.Kind{Name: "ptslow", Tier: capture.TierTraces,
		Config: func() any { return &netConfig{} },
		Build:  func(any) (capture.Step, error) { return netStep{}, nil }})
}
