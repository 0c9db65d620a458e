// Package gpu is the gpu step: the NVIDIA DCGM exporter's series for the GPUs
// under the instance (the DCGM table, dcgmfields.go; the accumulator that
// folds them into views.GPUState, gpuacc.go), stored as a views.GPUView under
// views.FindingGPU, and how a GPU is judged (judge.go), for its summary and
// for triage's gpu-degraded rule.
package gpu

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/autocapture/autocapture/capture/internal/promkit"
	"github.com/autocapture/autocapture/capture/internal/stepkit"
	"github.com/autocapture/autocapture/capture/internal/views"
	"github.com/autocapture/autocapture/vocab"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
)

// The gpu step (issue: "the GPU"): the NVIDIA DCGM exporter's series for the
// GPUs under the instance, read from Prometheus, as a GPUView (capture/internal/views) under
// Findings[FindingGPU] for the gpu-degraded rule (capture/triage/triagegpu.go).
//
// It runs a constant number of queries (QueryNames), whatever the number
// of GPUs, in parallel, each under its own deadline (promkit.RunQuery, as the
// prometheus step's). Three read the window's raw samples with a range
// selector at its end, so every sample counts (the OR of the clock event
// bitmask misses none, as a range query's steps could); one reads the GPUs'
// max SM clock. Every DCGM name comes from one table (dcgmFields,
// dcgmfields.go): both dcgm-exporter generations, the classic one and the
// exporter-4.9 / DCGM 4.6+ one with base units, each normalised to the
// view's units (MHz, °C, W, 0..1). DCGM's blank sentinels are missing,
// never values (dcgmBlank).

// Config is the gpu step's config.
type Config struct {
	// Selector is PromQL label matchers, without braces, that pick the DCGM
	// series of the instance's GPUs; a template the playbook renders (the
	// shipped preset: the exporter on the instance's host,
	// instance=~"<host>:[0-9]+"; see capture/README.md, Triage, GPU).
	Selector string `yaml:"selector" json:"selector"`
	// MaxClockLookback is how far back the highest SM clock seen stands for
	// the GPU's max when the exporter does not report DCGM_FI_DEV_MAX_SM_CLOCK.
	// Default 1d.
	MaxClockLookback time.Duration `yaml:"max_clock_lookback,omitempty" json:"max_clock_lookback,omitempty"`
	// Timeout bounds each query; default the Prometheus endpoint's timeout, else 10s.
	Timeout time.Duration `yaml:"timeout,omitempty" json:"timeout,omitempty"`
}

// Step is a built gpu step.
type Step struct {
	cfg Config
}

var _ vocab.Step = (*Step)(nil)

// Kind is the gpu step kind, registered by capture/kinds.go.
var Kind = vocab.Kind{
	Name:   "gpu",
	Tier:   vocab.TierMetrics,
	Doc:    "Reads the NVIDIA DCGM exporter's series for the instance's GPUs from Prometheus (clock event reasons, SM clock vs max, temperature, power, util, XID, ECC, row remap, NVLink; both DCGM generations) in a constant number of parallel queries; a GPUView for the gpu-degraded verdict, a JSON artifact.",
	Config: func() any { return &Config{} },
	Build:  func(cfg any) (vocab.Step, error) { return New(*cfg.(*Config)) },
}

// New validates cfg and returns the step.
func New(cfg Config) (*Step, error) {
	sel := strings.TrimSpace(cfg.Selector)
	if sel == "" {
		return nil, vocab.Errorf(vocab.ReasonBadConfig, "gpu: selector is required (label matchers for the instance's DCGM series)")
	}
	if _, err := parser.NewParser(parser.Options{}).ParseMetricSelector("{" + sel + "}"); err != nil {
		return nil, vocab.Errorf(vocab.ReasonBadConfig, "gpu: selector %q: %w", sel, err)
	}
	if cfg.MaxClockLookback < 0 || cfg.Timeout < 0 {
		return nil, vocab.Errorf(vocab.ReasonBadConfig, "gpu: negative max_clock_lookback or timeout")
	}
	if cfg.MaxClockLookback == 0 {
		cfg.MaxClockLookback = 24 * time.Hour
	}
	cfg.Selector = sel
	return &Step{cfg: cfg}, nil
}

// The step's queries. clock_max is an instant query; the others read raw
// samples: events and gauges over the window, errors over the window and
// errorsBefore ahead of it (the counters' and the last XID's value before).
const (
	gqEvents   = "gpu_clock_events"
	gqGauges   = "gpu_gauges"
	gqErrors   = "gpu_errors"
	gqClockMax = "gpu_clock_max"
)

// QueryNames lists the step's queries: a constant number, whatever the GPU count.
var QueryNames = []string{gqEvents, gqGauges, gqErrors, gqClockMax}

// errorsBefore is how much earlier than the window the errors query starts,
// so counters and the last XID have a reading from before it (Prometheus's
// default lookback).
const errorsBefore = 5 * time.Minute

// queries are the step's PromQL queries over a window of w, every DCGM
// name from the table (dcgmFields), grouped by how the accumulator folds it.
func (g *Step) queries(w time.Duration) []promkit.PromQuery {
	sel := g.cfg.Selector
	raw := func(span time.Duration, procs ...dcgmProc) string {
		return fmt.Sprintf(`{__name__=~"%s",%s}[%s]`, strings.Join(dcgmNamesOf(procs...), "|"), sel, promSpan(span))
	}
	// The GPU's max SM clock (either generation's max field), else the
	// highest SM clock seen over the lookback; the blank sentinels are
	// dropped before the unit changes; dcgm_series keeps the name read.
	look := promSpan(g.cfg.MaxClockLookback)
	var parts []string
	for _, c := range []struct {
		proc dcgmProc
		as   string
	}{{procClockMax, "max"}, {procClock, "seen"}} {
		for _, name := range dcgmNamesOf(c.proc) {
			unit := dcgmByName[name].unit
			blank, scale := float64(dcgmInt32Blank), ""
			if unit == unitHz {
				blank = dcgmWideBlank
			}
			if unit.Scale != 1 {
				scale = fmt.Sprintf(" * %g", unit.Scale)
			}
			parts = append(parts, fmt.Sprintf(`label_replace(label_replace((max_over_time(%s{%s}[%s]) < %.0f)%s, "dcgm_field", "%s", "", ""), "dcgm_series", "%s", "", "")`,
				name, sel, look, blank, scale, c.as, name))
		}
	}
	to := g.cfg.Timeout
	return []promkit.PromQuery{
		{Name: gqEvents, Query: raw(w, procBitmask, procEventCount), Timeout: to},
		{Name: gqGauges, Query: raw(w, procClock, procMax, procUtil), Timeout: to},
		{Name: gqErrors, Query: raw(w+errorsBefore, procLastCode, procCodeCount, procIncrease, procFlag), Timeout: to},
		{Name: gqClockMax, Query: strings.Join(parts, " or "), Timeout: to},
	}
}

// promSpan writes d as a PromQL duration in whole seconds (at least 1s).
func promSpan(d time.Duration) string {
	return model.Duration(max(time.Second, d.Round(time.Second))).String()
}

// Run runs the queries in parallel and builds the GPUView. It fails only
// when every query failed.
func (g *Step) Run(ctx context.Context, in *vocab.Input) (*vocab.Result, error) {
	pt, err := promkit.TargetOf(in, "gpu")
	if err != nil {
		return nil, err
	}
	began := time.Now()
	w := pt.End.Sub(pt.Start)
	queries := g.queries(w)
	outs := pt.RunAll(ctx, queries)
	wall := time.Since(began)

	view := &views.GPUView{Selector: g.cfg.Selector, Window: w.Seconds()}
	var firstErr *promkit.QueryOutcome
	view.Failed, firstErr = promkit.Failures(outs)
	acc := NewAccumulator(pt.Start)
	for _, o := range outs {
		if o.Err == nil {
			acc.Add(o.Result)
		}
	}
	view.GPUs = acc.States()
	view.Measured = len(view.GPUs) > 0
	res := &vocab.Result{Findings: map[string]any{views.FindingGPU: view, "source": vocab.SourcePromQL, "queries": len(outs)}}
	if view.Failed != nil {
		res.Findings["failed"] = view.Failed
	}
	promkit.PutJSONArtifact(ctx, in, res, "gpu.json", map[string]any{"prometheus": stepkit.RedactURL(pt.Ep.URL), "selector": g.cfg.Selector,
		"wall_s": wall.Seconds(), "queries": outs, "view": view})
	res.Summary = gpuSummary(view) + fmt.Sprintf(" (%d PromQL queries in %.2fs)", len(outs), wall.Seconds())
	return res, promkit.AllFailedErr("gpu: prometheus "+stepkit.RedactURL(pt.Ep.URL), outs, view.Failed, firstErr)
}

// gpuSummary is the step's line: "2 GPUs on node-a: GPU 1 sw_thermal, SM
// 1089/1980 MHz, 88 °C", or why the GPUs were not measured.
func gpuSummary(v *views.GPUView) string {
	if !v.Measured {
		return "GPU not measured: " + UnmeasuredWhy(v)
	}
	var hosts []string
	seen := map[string]bool{}
	for _, g := range v.GPUs {
		if h := g.Hostname; h != "" && !seen[h] {
			seen[h] = true
			hosts = append(hosts, h)
		}
	}
	head := fmt.Sprintf("%d GPU", len(v.GPUs))
	if len(v.GPUs) != 1 {
		head += "s"
	}
	if len(hosts) > 0 {
		head += " on " + strings.Join(hosts, ", ")
	}
	var parts []string
	for _, g := range v.GPUs {
		if iss, _ := Check(g, DefaultClockRatio, false); len(iss) > 0 {
			parts = append(parts, "GPU "+g.GPU+" "+strings.Join(append(iss, Figures(g)...), ", "))
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "no abnormal throttling, XID or uncorrectable ECC error in the window")
	}
	line := head + ": " + strings.Join(parts, "; ")
	if len(v.Failed) > 0 {
		line += fmt.Sprintf("; %d queries failed", len(v.Failed))
	}
	return line
}
