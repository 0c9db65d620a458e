// Package triage is the triage step: one verdict from the earlier steps'
// canonical signals and the peers and GPU views (the rules, their evidence,
// the baselines, the scope and the gpu-degraded rule; see below).
package triage

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/autocapture/autocapture/capture/gpu"
	"github.com/autocapture/autocapture/capture/internal/stepkit"
	"github.com/autocapture/autocapture/vocab"
)

// Config configures the triage step, which turns tier-1 signals into one
// verdict: the rules, their thresholds and their order are in docs/triage.md
// (kv-pressure, overload, prefill-bound, gpu-degraded, decode-bound,
// unexplained, client-aborts, healthy; the first that holds is primary, every
// other that holds contributes).
//
// It reads only canonical signals (vocab/signals.go), PromQL's before the
// scrape's, so it answers from the instance scrape alone when Prometheus is
// down. Queueing is judged by what is current: vLLM's lifecycle histograms
// observe a request only when it finishes, so at a queue's onset the wait a
// request faces now (the oldest waiting request's age, else waiting ÷ the
// admitted rate) decides, and the queue-time histogram only corroborates, when
// trusted (histogramLag). Causes come before symptoms: a full KV pool deepens
// the queue and slows prefill, so it is primary over both. With no signals at
// all the verdict is no-evidence.
type Config struct {
	// From lists the step ids whose signals triage reads, earlier ids winning
	// where windows are unknown; a windowed signal comes from the step with the
	// shortest window, a gauge is the highest reading (preferFresh).
	// Default: every earlier step, PromQL sources first.
	From []string `yaml:"from,omitempty" json:"from,omitempty"`
	// Thresholds override the defaults one by one.
	Thresholds Thresholds `yaml:"thresholds,omitempty" json:"thresholds,omitempty"`
	// IgnoreBaselines judges every signal by its absolute threshold even
	// where the snapshot read the instance's baseline (triagebaseline.go).
	IgnoreBaselines bool `yaml:"ignore_baselines,omitempty" json:"ignore_baselines,omitempty"`
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
	// QueueWait (s): the current wait (oldest waiting request, else waiting ÷
	// admitted rate) from which a deep queue is overload rather than a burst
	// that drains at once. Default 1, half the TTFT alert's 2 s.
	QueueWait float64 `yaml:"queue_wait,omitempty" json:"queue_wait,omitempty"`
	// HistMinRequests: the fewest finished requests in its window for the
	// queue-time histogram to speak for the queue. Default 20, the scrape's
	// floor for a p99.
	HistMinRequests float64 `yaml:"hist_min_requests,omitempty" json:"hist_min_requests,omitempty"`
	// HistMinCoverage (0..1): under a deep queue, the share of the requests
	// waiting now that the queue-time histogram must account for (its mean
	// wait × the admitted rate, Little's law) to be trusted. Default 0.5.
	HistMinCoverage float64 `yaml:"hist_min_coverage,omitempty" json:"hist_min_coverage,omitempty"`
	// PromptGrowth: with a baseline, the ratio of the prompt length to the
	// instance's own before which prompts count as long. Default 2.
	PromptGrowth float64 `yaml:"prompt_growth,omitempty" json:"prompt_growth,omitempty"`
	// PrefillGrowth: with a baseline, the ratio of the prefill time to the
	// instance's own from which prefill counts as slow. Default 3: under
	// load a wider batch shares each step's token budget, so prefill of the
	// same prompts stretches (vllmsim: up to 2× past the knee).
	PrefillGrowth float64 `yaml:"prefill_growth,omitempty" json:"prefill_growth,omitempty"`
	// GPUClockRatio (0..1): a GPU's SM clock under load below this share of
	// its max counts as degraded, and makes a power_cap reason abnormal
	// (triagegpu.go). Default 0.8: power capping at full load is routine on
	// an H100 and costs a few percent of clock, not a fifth.
	GPUClockRatio float64 `yaml:"gpu_clock_ratio,omitempty" json:"gpu_clock_ratio,omitempty"`
	// ImbalanceRatio: the instance's request rate over its peers' median from
	// which, with the same per-request work, it is a routing imbalance
	// (triagescope.go). Default 2.
	ImbalanceRatio float64 `yaml:"imbalance_ratio,omitempty" json:"imbalance_ratio,omitempty"`
	// ImbalanceWorkTolerance (0..1): how far the instance's mean prompt and
	// output lengths may sit from its peers' medians and still count as the
	// same per-request work. Default 0.5 (±50%): a mean length over a
	// rate window of a few dozen requests is noisy (log-normal lengths;
	// the fleet proof's 15 s windows missed a 3× share at ±30% about one
	// run in five), while another client class's prompts differ by
	// multiples.
	ImbalanceWorkTolerance float64 `yaml:"imbalance_work_tolerance,omitempty" json:"imbalance_work_tolerance,omitempty"`
	// FleetShare (0..1): the share of the model's instances past the
	// verdict's threshold above which the cause is fleet-wide. Default 0.5.
	FleetShare float64 `yaml:"fleet_share,omitempty" json:"fleet_share,omitempty"`
}

// DefaultThresholds are the thresholds a triage step uses unless its config says
// otherwise: the shipped alerts' own thresholds where one exists.
var DefaultThresholds = Thresholds{
	TTFTP99: 2, ITLP99: 0.2, QueueDepth: 10, KVUsage: 0.95, PreemptionsPerS: 0.05,
	AbortRatio: 0.05, Running: 64, PromptTokensMean: 2000, PrefillTimeMean: 0.5, QueueShare: 0.5,
	QueueWait: 1, HistMinRequests: 20, HistMinCoverage: 0.5, PromptGrowth: 2, PrefillGrowth: 3,
	GPUClockRatio: gpu.DefaultClockRatio, ImbalanceRatio: 2, ImbalanceWorkTolerance: 0.5, FleetShare: 0.5,
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
		if (name == "kv_usage" || name == "abort_ratio" || name == "queue_share" || name == "hist_min_coverage" ||
			name == "imbalance_work_tolerance" || name == "fleet_share" || name == "gpu_clock_ratio") && x > 1 {
			return fmt.Errorf("threshold %s: %v is a ratio, want 0..1", name, x)
		}
	}
	return nil
}

// Step is a built triage step.
type Step struct {
	cfg Config
}

var _ vocab.Step = (*Step)(nil)

// Kind is the triage step kind, registered by capture/kinds.go.
var Kind = vocab.Kind{
	Name:   "triage",
	Tier:   vocab.TierTriage,
	Doc:    "Reaches one verdict (healthy, overload, kv-pressure, prefill-bound, gpu-degraded, decode-bound, client-aborts, unexplained, or no-evidence when nothing was measured) from tier-1 signals, with contributing factors, evidence and advice.",
	Config: func() any { return &Config{} },
	Build:  func(cfg any) (vocab.Step, error) { return New(*cfg.(*Config)) },
}

// New validates cfg, fills default thresholds and returns the step.
func New(cfg Config) (*Step, error) {
	if err := cfg.Thresholds.validate(); err != nil {
		return nil, vocab.Errorf(vocab.ReasonBadConfig, "triage: %w", err)
	}
	cfg.Thresholds = cfg.Thresholds.withDefaults()
	return &Step{cfg: cfg}, nil
}

// Run merges the earlier steps' signals and diagnoses them. It does no I/O.
// Its findings name the steps read and, per signal, where it came from and
// how old it was (Origin); its signals add the current wait it derived.
func (t *Step) Run(_ context.Context, in *vocab.Input) (*vocab.Result, error) {
	sig, used := mergedSignals(in.Prior, t.cfg.From)
	now := stepkit.EnvNow(in.Env)
	org := origins(in.Prior, used, sig, now)
	preferFresh(in.Prior, used, sig, org, now)
	v, derived := diagnose(sig, org, t.cfg.Thresholds, t.cfg.IgnoreBaselines, viewsOf(in.Prior))
	if v.ID == vocab.VerdictNoEvidence {
		v.Evidence = append(v.Evidence[:1], append(missedEvidence(in.Missed), v.Evidence[1:]...)...)
	}
	for k, x := range derived {
		sig[k] = x
		org[k] = vocab.Origin{Step: "triage", Window: -1, Age: -1}
	}
	findings := map[string]any{"sources": used, "origins": org}
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
	if v.ID == vocab.VerdictUnexplained || v.ID == vocab.VerdictHealthy {
		for _, l := range v.Evidence[min(1, len(v.Evidence)):] { // nothing found: say the GPU was not looked at
			if strings.HasPrefix(l, "GPU not measured") {
				summary += "; GPU not measured"
			}
		}
	}
	return &vocab.Result{Summary: summary, Findings: findings, Signals: sig, Verdict: v}, nil
}

// missedEvidence names, by step id, what kept each step from measuring:
// "snapshot: not configured: no Prometheus (set prometheus.url)". Steps kept
// out by the same words share one line ("gpu, peers, snapshot: …"): five
// PromQL steps without a Prometheus are one absence, said once.
func missedEvidence(missed map[string]string) []string {
	ids := make([]string, 0, len(missed))
	for id := range missed {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	byWhy := map[string][]string{}
	var order []string
	for _, id := range ids {
		why := missed[id]
		if _, seen := byWhy[why]; !seen {
			order = append(order, why)
		}
		byWhy[why] = append(byWhy[why], id)
	}
	out := make([]string, len(order))
	for i, why := range order {
		out[i] = strings.Join(byWhy[why], ", ") + ": " + why
	}
	return out
}

// origins says, for each merged signal, the first step in used that gave it
// (the one mergedSignals kept) and the window and age that step recorded.
func origins(prior map[string]*vocab.Result, used []string, sig vocab.Signals, now time.Time) map[string]vocab.Origin {
	out := make(map[string]vocab.Origin, len(sig))
	for _, id := range used {
		for name := range prior[id].Signals {
			if _, seen := out[name]; !seen {
				out[name] = originOf(prior[id], id, name, now)
			}
		}
	}
	return out
}

// originOf is where step id's signal name came from, as its findings say.
func originOf(r *vocab.Result, id, name string, now time.Time) vocab.Origin {
	src, _ := r.Findings["source"].(string)
	o := vocab.Origin{Step: id, Source: src, Window: -1, Age: -1}
	if w, ok := floatMap(r.Findings[vocab.FindingSignalWindows])[name]; ok {
		o.Window = w
	}
	if at, ok := r.Findings[vocab.FindingSignalsAt].(string); ok {
		if ts, err := time.Parse(time.RFC3339Nano, at); err == nil {
			o.Age = max(0, now.Sub(ts).Seconds()) + floatMap(r.Findings[vocab.FindingSignalLags])[name]
		}
	}
	return o
}

// gauges are read at moments; each source reduces them its own way (PromQL
// takes the window's worst, the scrape the higher of its two readings, up to
// a second fresher than PromQL's last subquery step). Like the scrape's two
// readings, the sources' readings combine by the highest: a queue deep or a
// pool full by either source was so. baselines only PromQL gives; for them
// (and for a source's own oldest-wait) the order of `from` decides alone.
var gauges = map[string]bool{vocab.SigQueueDepth: true, vocab.SigRunning: true, vocab.SigKVUsage: true}

// fromOrder says whether the order of `from` alone decides a signal: a
// baseline, or a source's own oldest-wait.
func fromOrder(name string) bool {
	return name == vocab.SigQueueOldest || vocab.IsBaseline(name)
}

// preferFresh replaces each signal that summarises a window (a rate, a
// latency quantile, a stage time, a ratio) by the value of the source with the
// shortest window that has it. At the onset of a cause a 2-minute PromQL
// window is mostly the calm before it while the scrape's few seconds are the
// cause itself; in a steady state the two agree, and the scrape alone already
// names every simulated cause. Sources whose windows are unknown keep the
// order of `from`. Gauges take the highest reading of any source.
func preferFresh(prior map[string]*vocab.Result, used []string, sig vocab.Signals, org map[string]vocab.Origin, now time.Time) {
	for name, best := range org {
		if fromOrder(name) || (best.Window < 0 && !gauges[name]) {
			continue
		}
		for _, id := range used {
			v, ok := prior[id].Signals[name]
			if !ok {
				continue
			}
			o := originOf(prior[id], id, name, now)
			if gauges[name] && v > sig[name] || !gauges[name] && o.Window > 0 && o.Window < best.Window {
				best, sig[name] = o, v
			}
		}
		org[name] = best
	}
}

// floatMap reads a findings map of numbers, as a step wrote it or as JSON
// decoded it from the run's record.
func floatMap(v any) map[string]float64 {
	switch m := v.(type) {
	case map[string]float64:
		return m
	case map[string]any:
		out := make(map[string]float64, len(m))
		for k, x := range m {
			if f, ok := x.(float64); ok {
				out[k] = f
			}
		}
		return out
	}
	return nil
}
