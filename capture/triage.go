package capture

import (
	"context"
	"fmt"
	"reflect"
	"strings"
)

// Triage turns tier-1 signals into one verdict, following the seed's rules: read
// the queue, the KV pool and the prefill/decode split before anything else.
//
// It reads only canonical signals (signals.go) from earlier steps, PromQL's
// before the scrape's, so it answers from the instance scrape alone when
// Prometheus is down. Each rule needs only absolute values and stage shares from
// one moment; PromQL baselines (…_baseline) add "versus before" evidence.
//
// The rules, each over the thresholds below:
//
//	kv-pressure    KV usage >= kv_usage, or preemptions/s > preemptions_per_s
//	               (default 0.05/s: a rare preemption is routine in wide batches)
//	               (vLLM preempts only when the pool has no free block, so either
//	               proves the pool full; a 5 s gap often holds no preemption)
//	overload       queue_depth >= queue_depth, queue time >= queue_share of
//	               queue+prefill, and prefill flat (< prefill_time_mean)
//	prefill-bound  prompts long (>= prompt_tokens_mean) and prefill slow or
//	               TTFT p99 >= ttft_p99
//	decode-bound   ITL p99 >= itl_p99 with a wide batch (running >= running)
//	unexplained    a slow stage (TTFT p99, ITL p99 or prefill) that none of the
//	               four causes above explains
//	client-aborts  abort_ratio >= abort_ratio
//	healthy        none of the above
//
// Precedence, highest first, is the order above. Causes come before symptoms:
// a full KV pool caps admission and forces recomputation, so it also deepens
// the queue and slows prefill, and its remedies (more KV per instance, more
// instances) cover overload's; a deep queue with flat prefill is capacity, and
// long prompts explain slow prefill before batch width explains slow decode.
// Unexplained comes before client-aborts because aborts are what clients do
// when any stage is slow: when something is slow, the slowness is the thing to
// chase (traces, then a profile); client-aborts is primary only when latency
// is within thresholds (the clients' timeouts are tighter than the SLO). Every
// other rule that holds is a contributing factor, so overload's full KV pool and
// aborting clients show as contributing, never lost.
//
// When no earlier step produced signals (Prometheus and the scrape both
// failed) the verdict is unexplained: the metrics are blind, so escalate.
type TriageConfig struct {
	// From lists the step ids whose signals triage reads, earlier ids winning.
	// Default: every earlier step, PromQL sources first.
	From []string `yaml:"from,omitempty" json:"from,omitempty"`
	// Thresholds override the defaults one by one.
	Thresholds Thresholds `yaml:"thresholds,omitempty" json:"thresholds,omitempty"`
}

// Thresholds are the numbers the rules compare signals with, keyed by the
// signal they apply to. A zero field takes the default (DefaultThresholds).
type Thresholds struct {
	// TTFTP99 (s): p99 time to first token counted as slow. Default 2, the alert's.
	TTFTP99 float64 `yaml:"ttft_p99,omitempty" json:"ttft_p99,omitempty"`
	// ITLP99 (s): p99 inter-token latency counted as slow. Default 0.2, the alert's.
	ITLP99 float64 `yaml:"itl_p99,omitempty" json:"itl_p99,omitempty"`
	// QueueDepth: waiting requests counted as a deep queue. Default 10, the alert's.
	QueueDepth float64 `yaml:"queue_depth,omitempty" json:"queue_depth,omitempty"`
	// KVUsage (0..1): KV pool fullness counted as pressure. Default 0.95, the alert's.
	KVUsage float64 `yaml:"kv_usage,omitempty" json:"kv_usage,omitempty"`
	// PreemptionsPerS: preemption rate above which the pool counts as full.
	// Default 0.05/s: a preemption now and then is routine in wide-batch decode;
	// a pool that is really full preempts far more often (vllmsim: ~1/s).
	PreemptionsPerS float64 `yaml:"preemptions_per_s,omitempty" json:"preemptions_per_s,omitempty"`
	// AbortRatio (0..1): share of finished requests aborted. Default 0.05, the alert's.
	AbortRatio float64 `yaml:"abort_ratio,omitempty" json:"abort_ratio,omitempty"`
	// Running: batch width counted as wide for decode. Default 64.
	Running float64 `yaml:"running,omitempty" json:"running,omitempty"`
	// PromptTokensMean: mean prompt length counted as long. Default 2000.
	PromptTokensMean float64 `yaml:"prompt_tokens_mean,omitempty" json:"prompt_tokens_mean,omitempty"`
	// PrefillTimeMean (s): mean prefill time counted as slow. Default 0.5.
	PrefillTimeMean float64 `yaml:"prefill_time_mean,omitempty" json:"prefill_time_mean,omitempty"`
	// QueueShare (0..1): queue time's share of queue+prefill time above which
	// waiting dominates time to first token. Default 0.5.
	QueueShare float64 `yaml:"queue_share,omitempty" json:"queue_share,omitempty"`
}

// DefaultThresholds are the thresholds a triage step uses unless its config says
// otherwise: the shipped alerts' own thresholds where one exists.
var DefaultThresholds = Thresholds{
	TTFTP99: 2, ITLP99: 0.2, QueueDepth: 10, KVUsage: 0.95, PreemptionsPerS: 0.05,
	AbortRatio: 0.05, Running: 64, PromptTokensMean: 2000, PrefillTimeMean: 0.5, QueueShare: 0.5,
}

// withDefaults fills zero fields from DefaultThresholds.
func (t Thresholds) withDefaults() Thresholds {
	v, d := reflect.ValueOf(&t).Elem(), reflect.ValueOf(DefaultThresholds)
	for i := range v.NumField() {
		if v.Field(i).Float() == 0 {
			v.Field(i).Set(d.Field(i))
		}
	}
	return t
}

// validate rejects negative thresholds and ratios above 1.
func (t Thresholds) validate() error {
	v, ty := reflect.ValueOf(t), reflect.TypeOf(t)
	for i := range v.NumField() {
		name := strings.Split(ty.Field(i).Tag.Get("yaml"), ",")[0]
		x := v.Field(i).Float()
		if x < 0 {
			return fmt.Errorf("threshold %s: %v is negative", name, x)
		}
		if (name == "kv_usage" || name == "abort_ratio" || name == "queue_share") && x > 1 {
			return fmt.Errorf("threshold %s: %v is a ratio, want 0..1", name, x)
		}
	}
	return nil
}

// TriageStep is a built triage step.
type TriageStep struct {
	cfg TriageConfig
}

var _ Step = (*TriageStep)(nil)

func init() {
	Register(Kind{
		Name:   "triage",
		Tier:   TierTriage,
		Doc:    "Reaches one verdict (healthy, overload, kv-pressure, prefill-bound, decode-bound, client-aborts, unexplained) from tier-1 signals, with contributing factors, evidence and advice.",
		Config: func() any { return &TriageConfig{} },
		Build:  func(cfg any) (Step, error) { return NewTriage(*cfg.(*TriageConfig)) },
	})
}

// NewTriage validates cfg, fills default thresholds and returns the step.
func NewTriage(cfg TriageConfig) (*TriageStep, error) {
	if err := cfg.Thresholds.validate(); err != nil {
		return nil, Errorf(ReasonBadConfig, "triage: %w", err)
	}
	cfg.Thresholds = cfg.Thresholds.withDefaults()
	return &TriageStep{cfg: cfg}, nil
}

// Run merges the earlier steps' signals and diagnoses them. It does no I/O.
func (t *TriageStep) Run(_ context.Context, in *Input) (*Result, error) {
	sig, used := mergedSignals(in.Prior, t.cfg.From)
	v := Diagnose(sig, t.cfg.Thresholds)
	findings := map[string]any{"sources": used}
	if used == nil {
		findings["sources"] = []string{}
	}
	summary := v.ID
	if len(v.Contributing) > 0 {
		summary += " (also " + strings.Join(v.Contributing, ", ") + ")"
	}
	if len(v.Evidence) > 0 {
		summary += ": " + v.Evidence[0]
	}
	return &Result{Summary: summary, Findings: findings, Signals: sig, Verdict: v}, nil
}
