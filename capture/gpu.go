package capture

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
)

// The gpu step (issue: "the GPU"): the NVIDIA DCGM exporter's series for the
// GPUs under the instance, read from Prometheus, as a GPUView (views.go) under
// Findings[FindingGPU] for the gpu-degraded rule (triagegpu.go).
//
// It runs a constant number of queries (gpuQueryNames), whatever the number
// of GPUs, in parallel, each under its own deadline (runQuery, as the
// prometheus step's). Three read the window's raw samples with a range
// selector at its end, so every sample counts (the OR of the clock event
// bitmask misses none, as a range query's steps could); one reads the GPUs'
// max SM clock. Each matches both DCGM generations by name, the classic one
// and the exporter-4.9 / DCGM-4.7 one with base units, and normalises to the
// view's units (MHz, °C, W, 0..1). DCGM's blank sentinels (dcgm_fields.h:
// DCGM_INT32_BLANK 0x7ffffff0 and the NOT_FOUND, NOT_SUPPORTED, NOT_PERMISSIONED
// values above it; DCGM_INT64_BLANK 0x7ffffffffffffff0…; DCGM_FP64_BLANK 2^47…)
// are missing, never values.

// GPUConfig is the gpu step's config.
type GPUConfig struct {
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

// GPUStep is a built gpu step.
type GPUStep struct {
	cfg GPUConfig
}

var _ Step = (*GPUStep)(nil)

func init() {
	Register(Kind{
		Name:   "gpu",
		Tier:   TierMetrics,
		Doc:    "Reads the NVIDIA DCGM exporter's series for the instance's GPUs from Prometheus (clock event reasons, SM clock vs max, temperature, power, util, XID, ECC, row remap, NVLink; both DCGM generations) in a constant number of parallel queries; a GPUView for the gpu-degraded verdict, a JSON artifact.",
		Config: func() any { return &GPUConfig{} },
		Build:  func(cfg any) (Step, error) { return NewGPU(*cfg.(*GPUConfig)) },
	})
}

// NewGPU validates cfg and returns the step.
func NewGPU(cfg GPUConfig) (*GPUStep, error) {
	sel := strings.TrimSpace(cfg.Selector)
	if sel == "" {
		return nil, Errorf(ReasonBadConfig, "gpu: selector is required (label matchers for the instance's DCGM series)")
	}
	if _, err := parser.NewParser(parser.Options{}).ParseMetricSelector("{" + sel + "}"); err != nil {
		return nil, Errorf(ReasonBadConfig, "gpu: selector %q: %w", sel, err)
	}
	if cfg.MaxClockLookback < 0 || cfg.Timeout < 0 {
		return nil, Errorf(ReasonBadConfig, "gpu: negative max_clock_lookback or timeout")
	}
	if cfg.MaxClockLookback == 0 {
		cfg.MaxClockLookback = 24 * time.Hour
	}
	cfg.Selector = sel
	return &GPUStep{cfg: cfg}, nil
}

// DCGM series, by the field they feed and the factor to the view's unit.
type dcgmField struct {
	field string
	scale float64
}

const (
	fClockEvents = "clock_events"
	fClockCount  = "clock_event_count"
	fSMClock     = "sm_clock"
	fTemp        = "temp"
	fPower       = "power"
	fUtil        = "util"
	fXID         = "xid"
	fXIDCount    = "xid_count"
	fECC         = "ecc"
	fRemapFail   = "row_remap_failure"
	fNVLink      = "nvlink"
)

// dcgmSeries maps every DCGM series name the step reads, in both
// generations, to its field. Query names group them (gpuQueryNames).
var dcgmSeries = map[string]dcgmField{
	// Clock event (throttle) reasons: field 112 under its two names; the
	// exporter's own per-reason counts over 5-minute windows.
	"DCGM_FI_DEV_CLOCKS_EVENT_REASONS":   {fClockEvents, 1},
	"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": {fClockEvents, 1},
	"DCGM_EXP_CLOCK_EVENTS_COUNT":        {fClockCount, 1},
	// Gauges, classic (MHz, °C, W, %) and DCGM 4.7 (Hz, °C, W, ratio).
	"DCGM_FI_DEV_SM_CLOCK":          {fSMClock, 1},
	"DCGM_FI_DEV_SM_CLOCK_HERTZ":    {fSMClock, 1e-6},
	"DCGM_FI_DEV_GPU_TEMP":          {fTemp, 1},
	"DCGM_FI_DEV_GPU_TEMP_CELSIUS":  {fTemp, 1},
	"DCGM_FI_DEV_POWER_USAGE":       {fPower, 1},
	"DCGM_FI_DEV_POWER_USAGE_WATTS": {fPower, 1},
	"DCGM_FI_DEV_GPU_UTIL":          {fUtil, 0.01},
	"DCGM_FI_DEV_GPU_UTIL_RATIO":    {fUtil, 1},
	"DCGM_FI_PROF_GR_ENGINE_ACTIVE": {fUtil, 1},
	// Errors: the last XID's value (a gauge), the exporter's per-XID counts,
	// uncorrectable ECC (volatile DBE count, uncorrectable remapped rows),
	// row-remap failure, NVLink error counters.
	"DCGM_FI_DEV_XID_ERRORS":                        {fXID, 1},
	"DCGM_FI_DEV_XID_ERROR":                         {fXID, 1},
	"DCGM_EXP_XID_ERRORS_COUNT":                     {fXIDCount, 1},
	"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL":                 {fECC, 1},
	"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS":       {fECC, 1},
	"DCGM_FI_DEV_ROW_REMAP_FAILURE":                 {fRemapFail, 1},
	"DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": {fNVLink, 1},
	"DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": {fNVLink, 1},
	"DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL":   {fNVLink, 1},
	"DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": {fNVLink, 1},
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

// gpuQueryNames lists the step's queries: a constant number, whatever the GPU count.
var gpuQueryNames = []string{gqEvents, gqGauges, gqErrors, gqClockMax}

// errorsBefore is how much earlier than the window the errors query starts,
// so counters and the last XID have a reading from before it (Prometheus's
// default lookback).
const errorsBefore = 5 * time.Minute

// seriesOf returns the names feeding fields, sorted.
func seriesOf(fields ...string) []string {
	var out []string
	for name, f := range dcgmSeries {
		for _, want := range fields {
			if f.field == want {
				out = append(out, name)
			}
		}
	}
	sort.Strings(out)
	return out
}

// queries are the step's PromQL queries over a window of w ending at end.
func (g *GPUStep) queries(w time.Duration) []PromQuery {
	sel := g.cfg.Selector
	raw := func(span time.Duration, fields ...string) string {
		return fmt.Sprintf(`{__name__=~"%s",%s}[%s]`, strings.Join(seriesOf(fields...), "|"), sel, promSpan(span))
	}
	// The GPU's max SM clock: DCGM_FI_DEV_MAX_SM_CLOCK (MHz) or its 4.7 name
	// (Hz), else the highest SM clock seen over the lookback; the blank
	// sentinels are dropped before the unit changes.
	look := promSpan(g.cfg.MaxClockLookback)
	part := func(metric, field string, hertz bool) string {
		blank, scale := "2147483632", ""
		if hertz {
			blank, scale = "140737488355328", " / 1e6"
		}
		return fmt.Sprintf(`label_replace((max_over_time(%s{%s}[%s]) < %s)%s, "dcgm_field", "%s", "", "")`, metric, sel, look, blank, scale, field)
	}
	clockMax := strings.Join([]string{
		part("DCGM_FI_DEV_MAX_SM_CLOCK", "max", false), part("DCGM_FI_DEV_SM_MAX_CLOCK_HERTZ", "max", true),
		part("DCGM_FI_DEV_SM_CLOCK", "seen", false), part("DCGM_FI_DEV_SM_CLOCK_HERTZ", "seen", true),
	}, " or ")
	to := g.cfg.Timeout
	return []PromQuery{
		{Name: gqEvents, Query: raw(w, fClockEvents, fClockCount), Timeout: to},
		{Name: gqGauges, Query: raw(w, fSMClock, fTemp, fPower, fUtil), Timeout: to},
		{Name: gqErrors, Query: raw(w+errorsBefore, fXID, fXIDCount, fECC, fRemapFail, fNVLink), Timeout: to},
		{Name: gqClockMax, Query: clockMax, Timeout: to},
	}
}

// promSpan writes d as a PromQL duration in whole seconds (at least 1s).
func promSpan(d time.Duration) string {
	return model.Duration(max(time.Second, d.Round(time.Second))).String()
}

// Run runs the queries in parallel and builds the GPUView. It fails only
// when every query failed.
func (g *GPUStep) Run(ctx context.Context, in *Input) (*Result, error) {
	pt, err := promTargetOf(in, "gpu")
	if err != nil {
		return nil, err
	}
	began := time.Now()
	w := pt.end.Sub(pt.start)
	queries := g.queries(w)
	outs := pt.runAll(ctx, queries)
	wall := time.Since(began)

	view := &GPUView{Selector: g.cfg.Selector, Window: w.Seconds()}
	var firstErr *queryOutcome
	view.Failed, firstErr = queryFailures(outs)
	acc := newGPUAccumulator(pt.start)
	for _, o := range outs {
		if o.err == nil {
			acc.add(o.Result)
		}
	}
	view.GPUs = acc.states()
	view.Measured = len(view.GPUs) > 0
	res := &Result{Findings: map[string]any{FindingGPU: view, "source": SourcePromQL, "queries": len(outs)}}
	if view.Failed != nil {
		res.Findings["failed"] = view.Failed
	}
	putJSONArtifact(ctx, in, res, "gpu.json", map[string]any{"prometheus": redactURL(pt.ep.URL), "selector": g.cfg.Selector,
		"wall_s": wall.Seconds(), "queries": outs, "view": view})
	res.Summary = gpuSummary(view) + fmt.Sprintf(" (%d PromQL queries in %.2fs)", len(outs), wall.Seconds())
	return res, allFailedErr("gpu: prometheus "+redactURL(pt.ep.URL), outs, view.Failed, firstErr)
}

// dcgmBlank says whether v is one of DCGM's blank sentinels (missing, not a
// value): the int64 and fp64 ones from 2^47 up, and for fields DCGM keeps as
// 32-bit integers (every one read here but the 4.7 Hz clocks, which may pass
// 2^31) DCGM_INT32_BLANK 0x7ffffff0 up to 0x7fffffff.
func dcgmBlank(name string, v float64) bool {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0) || v >= 140737488355328:
		return true
	case strings.HasSuffix(name, "_HERTZ"):
		return false
	}
	return v >= 0x7ffffff0 && v <= 0x7fffffff
}

// clockEventBits decodes the clock event reasons bitmask (DCGM's
// DCGM_CLOCKS_EVENT_REASON_*; the names are DCGM_EXP_CLOCK_EVENTS_COUNT's
// clock_event values), in bit order.
var clockEventBits = []clockEventBit{
	{0x1, "gpu_idle"}, {0x2, "clocks_setting"}, {0x4, "power_cap"}, {0x8, "hw_slowdown"},
	{0x10, "sync_boost"}, {0x20, "sw_thermal"}, {0x40, "hw_thermal"}, {0x80, "hw_power_brake"},
	{0x100, "display_clocks"},
}

type clockEventBit struct {
	bit  uint64
	name string
}

// decodeClockEvents names the reasons set in mask, in bit order.
func decodeClockEvents(mask uint64) []string {
	var out []string
	for _, b := range clockEventBits {
		if mask&b.bit != 0 {
			out = append(out, b.name)
		}
	}
	return out
}

// gpuBusy is the utilisation (0..1) from which a GPU counts as under load
// for its lowest SM clock: an idle GPU drops its clocks on purpose.
const gpuBusy = 0.5

// gpuAcc gathers one GPU's samples across the queries.
type gpuAcc struct {
	st         GPUState
	mask       uint64
	events     map[string]bool
	clock      map[int64]float64 // ms → MHz
	util       map[int64]float64 // ms → 0..1, the highest source
	temp       *float64
	power      *float64
	clockMax   *float64
	clockSeen  *float64
	xids       map[int]bool
	ecc        *float64
	remap      *float64
	nvlink     *float64
	nvlinkSeen bool
}

// gpuAccumulator builds GPUStates from DCGM series, keyed by GPU.
type gpuAccumulator struct {
	start time.Time // the window's start: earlier samples are readings from before it
	gpus  map[string]*gpuAcc
}

func newGPUAccumulator(start time.Time) *gpuAccumulator {
	return &gpuAccumulator{start: start, gpus: map[string]*gpuAcc{}}
}

// label is the first non-empty of the labels.
func label(m model.Metric, names ...string) string {
	for _, n := range names {
		if v := m[model.LabelName(n)]; v != "" {
			return string(v)
		}
	}
	return ""
}

// gpuOf returns the GPU a series belongs to: by UUID (and MIG instance),
// else by the exporter's instance and gpu index.
func (a *gpuAccumulator) gpuOf(m model.Metric) *gpuAcc {
	key := label(m, "UUID", "uuid")
	if key == "" {
		key = label(m, "instance") + "/" + label(m, "gpu")
	}
	key += "/" + label(m, "GPU_I_ID")
	g := a.gpus[key]
	if g == nil {
		g = &gpuAcc{events: map[string]bool{}, clock: map[int64]float64{}, util: map[int64]float64{}, xids: map[int]bool{}}
		g.st = GPUState{GPU: label(m, "gpu"), UUID: label(m, "UUID", "uuid"), Device: label(m, "device"),
			Model: label(m, "modelName"), Hostname: label(m, "Hostname", "hostname"),
			Pod: label(m, "pod", "pod_name", "exported_pod")}
		if id := label(m, "GPU_I_ID"); id != "" && g.st.GPU != "" {
			g.st.GPU += "/" + id
		}
		a.gpus[key] = g
	}
	return g
}

// add folds one query's result in.
func (a *gpuAccumulator) add(v model.Value) {
	switch r := v.(type) {
	case model.Matrix:
		for _, ss := range r {
			a.addSeries(ss)
		}
	case model.Vector:
		for _, s := range r {
			g := a.gpuOf(s.Metric)
			x := float64(s.Value)
			if math.IsNaN(x) || math.IsInf(x, 0) {
				continue
			}
			switch s.Metric["dcgm_field"] {
			case "max":
				g.clockMax = maxPtr(g.clockMax, x)
			case "seen":
				g.clockSeen = maxPtr(g.clockSeen, x)
			}
		}
	}
}

// addSeries folds one raw series in, by its name.
func (a *gpuAccumulator) addSeries(ss *model.SampleStream) {
	name := string(ss.Metric[model.MetricNameLabel])
	f, ok := dcgmSeries[name]
	if !ok {
		return
	}
	g := a.gpuOf(ss.Metric)
	startMS := a.start.UnixMilli()
	var before *float64 // the last reading before the window
	var inc float64
	incSeen := false
	var prev *float64
	for _, p := range ss.Values {
		x := float64(p.Value)
		if dcgmBlank(name, x) {
			continue
		}
		x *= f.scale
		ts := int64(p.Timestamp)
		in := ts >= startMS
		switch f.field {
		case fClockEvents:
			g.st.ClockEventsMeasured = true
			g.mask |= uint64(x)
		case fClockCount:
			g.st.ClockEventsMeasured = true
			if e := label(ss.Metric, "clock_event"); x > 0 && e != "" {
				g.events[e] = true
			}
		case fSMClock:
			g.clock[ts] = x
		case fUtil:
			g.util[ts] = max(g.util[ts], x)
		case fTemp:
			g.temp = maxPtr(g.temp, x)
		case fPower:
			g.power = maxPtr(g.power, x)
		case fXID:
			// The last XID's value: one is reported in the window when the
			// value turns non-zero or changes there (an XID set before the
			// window and unchanged is not this incident's).
			if !in {
				before = &x
				continue
			}
			if x != 0 && (before == nil || *before != x) {
				g.xids[int(x)] = true
			}
			before = &x
		case fXIDCount:
			if code, err := strconv.Atoi(label(ss.Metric, "xid")); err == nil && in && x > 0 {
				g.xids[code] = true
			}
		case fRemapFail:
			if in {
				g.remap = maxPtr(g.remap, x)
			}
		case fECC, fNVLink:
			// Counters: their increase from the last reading before the
			// window (or the first in it), a reset counting from zero.
			if prev != nil && in {
				d := x - *prev
				if d < 0 {
					d = x
				}
				inc += d
				incSeen = true
			} else if in {
				incSeen = true
			}
			prev = &x
		}
	}
	switch {
	case !incSeen:
	case f.field == fECC: // a DBE and the row it remaps are one error: the larger count
		g.ecc = maxPtr(g.ecc, inc)
	case f.field == fNVLink:
		s := inc
		if g.nvlink != nil {
			s += *g.nvlink
		}
		g.nvlink = &s
	}
}

// maxPtr is the larger of *p (when set) and x.
func maxPtr(p *float64, x float64) *float64 {
	if p != nil && *p >= x {
		return p
	}
	return &x
}

// states are the GPUs' states, by gpu index then UUID.
func (a *gpuAccumulator) states() []GPUState {
	out := make([]GPUState, 0, len(a.gpus))
	for _, g := range a.gpus {
		st := g.st
		for _, e := range decodeClockEvents(g.mask) {
			g.events[e] = true
		}
		var unknown []string // a clock_event value the bitmask list does not know
		for e := range g.events {
			if !slices.ContainsFunc(clockEventBits, func(b clockEventBit) bool { return b.name == e }) {
				unknown = append(unknown, e)
			}
		}
		for _, b := range clockEventBits { // in bit order
			if g.events[b.name] {
				st.ClockEvents = append(st.ClockEvents, b.name)
			}
		}
		sort.Strings(unknown)
		st.ClockEvents = append(st.ClockEvents, unknown...)
		st.SMClockMHz, st.Util = clockUnderLoad(g.clock, g.util)
		st.SMClockMaxMHz = g.clockMax
		if st.SMClockMaxMHz == nil {
			st.SMClockMaxMHz = g.clockSeen
		}
		st.TempC, st.PowerW = g.temp, g.power
		for x := range g.xids {
			st.XIDs = append(st.XIDs, x)
		}
		sort.Ints(st.XIDs)
		st.ECCUncorrectable, st.RowRemapFailure, st.NVLinkErrors = g.ecc, g.remap, g.nvlink
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Hostname != b.Hostname {
			return a.Hostname < b.Hostname
		}
		ai, errA := strconv.Atoi(a.GPU)
		bi, errB := strconv.Atoi(b.GPU)
		if errA == nil && errB == nil && ai != bi {
			return ai < bi
		}
		if a.GPU != b.GPU {
			return a.GPU < b.GPU
		}
		return a.UUID < b.UUID
	})
	return out
}

// clockUnderLoad is the lowest SM clock at the samples where the GPU was
// busy (util >= gpuBusy; every sample when util is not reported; none when it
// never was busy) and the mean util over the window.
func clockUnderLoad(clock, util map[int64]float64) (lowest, mean *float64) {
	if len(util) > 0 {
		s := 0.0
		for _, u := range util {
			s += u
		}
		m := s / float64(len(util))
		mean = &m
	}
	for ts, c := range clock {
		if u, ok := util[ts]; len(util) > 0 && (!ok || u < gpuBusy) {
			continue
		}
		if lowest == nil || c < *lowest {
			lowest = &c
		}
	}
	return lowest, mean
}

// gpuSummary is the step's line: "2 GPUs on node-a: GPU 1 sw_thermal, SM
// 1089/1980 MHz, 88 °C", or why the GPUs were not measured.
func gpuSummary(v *GPUView) string {
	if !v.Measured {
		return "GPU not measured: " + gpuUnmeasuredWhy(v)
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
		if iss, _ := gpuCheck(g, DefaultThresholds.GPUClockRatio, false); len(iss) > 0 {
			parts = append(parts, "GPU "+g.GPU+" "+strings.Join(append(iss, gpuFigures(g)...), ", "))
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
