package gpu

import (
	"math"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/autocapture/autocapture/capture/internal/views"
	"github.com/prometheus/common/model"
)

// The gpu step's accumulator: DCGM series, by their row in the table
// (dcgmFields), folded into one GPUState per GPU in the view's units.

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
	st        views.GPUState
	mask      uint64
	events    map[string]bool
	clock     map[int64]float64 // ms → MHz
	util      map[int64]float64 // ms → 0..1, the highest source
	temp      *float64
	power     *float64
	clockMax  *float64
	clockSeen *float64
	maxFrom   []string // the series clockMax and clockSeen were read from
	seenFrom  []string
	xids      map[int]bool
	dbe       *float64
	rows      *float64
	remap     *float64
	nvlink    *float64
	series    map[string][]string // reading → the series it was read from
}

// read records that name gave reading a value.
func (g *gpuAcc) read(reading, name string) {
	if !slices.Contains(g.series[reading], name) {
		g.series[reading] = append(g.series[reading], name)
	}
}

// Accumulator builds GPUStates from DCGM series, keyed by GPU.
type Accumulator struct {
	start time.Time // the window's start: earlier samples are readings from before it
	gpus  map[string]*gpuAcc
}

func NewAccumulator(start time.Time) *Accumulator {
	return &Accumulator{start: start, gpus: map[string]*gpuAcc{}}
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
func (a *Accumulator) gpuOf(m model.Metric) *gpuAcc {
	key := label(m, "UUID", "uuid")
	if key == "" {
		key = label(m, "instance") + "/" + label(m, "gpu")
	}
	key += "/" + label(m, "GPU_I_ID")
	g := a.gpus[key]
	if g == nil {
		g = &gpuAcc{events: map[string]bool{}, clock: map[int64]float64{}, util: map[int64]float64{}, xids: map[int]bool{},
			series: map[string][]string{}}
		g.st = views.GPUState{GPU: label(m, "gpu"), UUID: label(m, "UUID", "uuid"), Device: label(m, "device"),
			Model: label(m, "modelName"), Hostname: label(m, "Hostname", "hostname"),
			Pod: label(m, "pod", "pod_name", "exported_pod")}
		if id := label(m, "GPU_I_ID"); id != "" && g.st.GPU != "" {
			g.st.GPU += "/" + id
		}
		a.gpus[key] = g
	}
	return g
}

// Add folds one query's result in.
func (a *Accumulator) Add(v model.Value) {
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
			name := string(s.Metric["dcgm_series"])
			switch s.Metric["dcgm_field"] {
			case "max":
				g.clockMax = maxPtr(g.clockMax, x)
				g.maxFrom = views.AppendNew(g.maxFrom, name)
			case "seen":
				g.clockSeen = maxPtr(g.clockSeen, x)
				g.seenFrom = views.AppendNew(g.seenFrom, name)
			}
		}
	}
}

// addSeries folds one raw series in, by its name's row in the table.
func (a *Accumulator) addSeries(ss *model.SampleStream) {
	name := string(ss.Metric[model.MetricNameLabel])
	n, ok := dcgmByName[name]
	if !ok {
		return
	}
	f := n.field
	g := a.gpuOf(ss.Metric)
	startMS := a.start.UnixMilli()
	var vals []float64
	var ts []int64
	for _, p := range ss.Values {
		if x := float64(p.Value); !dcgmBlank(name, x) {
			vals, ts = append(vals, x), append(ts, int64(p.Timestamp))
		}
	}
	if len(vals) == 0 {
		return
	}
	scale := n.unit.Scale
	if scale == 0 {
		scale = dcgmPercentOrRatio(vals)
	}
	gave := g.foldSamples(f, ss.Metric, vals, ts, startMS, scale)
	if f.proc == procIncrease && !g.addIncrease(f, vals, ts, startMS) {
		return
	}
	if gave {
		g.read(f.Reading, name)
	}
}

// foldSamples folds a series' samples (blanks dropped) in, in the view's
// units; it says whether the series gave its reading a value (a flag only
// counts from the window).
func (g *gpuAcc) foldSamples(f *DCGMField, m model.Metric, vals []float64, ts []int64, startMS int64, scale float64) bool {
	var before *float64 // procLastCode: the last reading before the window
	gave := f.proc != procFlag
	for i, x := range vals {
		x *= scale
		in := ts[i] >= startMS
		switch f.proc {
		case procBitmask:
			g.st.ClockEventsMeasured = true
			g.mask |= uint64(x)
		case procEventCount:
			g.st.ClockEventsMeasured = true
			if e := label(m, "clock_event"); x > 0 && e != "" {
				g.events[e] = true
			}
		case procClock:
			g.clock[ts[i]] = x
		case procUtil:
			g.util[ts[i]] = max(g.util[ts[i]], x)
		case procMax:
			if f.Reading == "temp_c" {
				g.temp = maxPtr(g.temp, x)
			} else {
				g.power = maxPtr(g.power, x)
			}
		case procLastCode:
			// The last XID's value: one is reported in the window when the
			// value turns non-zero or changes there (an XID set before the
			// window and unchanged is not this incident's).
			if in && x != 0 && (before == nil || *before != x) {
				g.xids[int(x)] = true
			}
			before = &x
		case procCodeCount:
			if code, err := strconv.Atoi(label(m, "xid")); err == nil && in && x > 0 {
				g.xids[code] = true
			}
		case procFlag:
			if in {
				g.remap, gave = maxPtr(g.remap, x), true
			}
		}
	}
	return gave
}

// addIncrease folds a counter's increase in the window into its reading;
// false when no reading lies in the window.
func (g *gpuAcc) addIncrease(f *DCGMField, vals []float64, ts []int64, startMS int64) bool {
	inc, ok := counterIncrease(vals, ts, startMS)
	if !ok {
		return false
	}
	switch f.Reading {
	case "ecc_dbe":
		g.dbe = maxPtr(g.dbe, inc)
	case "remapped_rows_uncorrectable":
		g.rows = maxPtr(g.rows, inc)
	default: // nvlink_errors: the sum of the four counters
		s := inc
		if g.nvlink != nil {
			s += *g.nvlink
		}
		g.nvlink = &s
	}
	return true
}

// counterIncrease is a counter's increase in the window: from the last
// reading before it (or the first in it), a reset counting from zero; ok
// false when no reading lies in the window.
func counterIncrease(vals []float64, ts []int64, startMS int64) (inc float64, ok bool) {
	var prev *float64
	for i, x := range vals {
		in := ts[i] >= startMS
		if in {
			ok = true
			if prev != nil {
				d := x - *prev
				if d < 0 {
					d = x
				}
				inc += d
			}
		}
		prev = &vals[i]
	}
	return inc, ok
}

// deref0 is *p, or 0 when p is nil.
func deref0(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}

// seriesRead keeps the readings some series gave a value, nil when none.
func seriesRead(m map[string][]string) map[string][]string {
	out := map[string][]string{}
	for k, v := range m {
		if len(v) > 0 {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// maxPtr is the larger of *p (when set) and x.
func maxPtr(p *float64, x float64) *float64 {
	if p != nil && *p >= x {
		return p
	}
	return &x
}

// States are the GPUs' states, by gpu index then UUID.
func (a *Accumulator) States() []views.GPUState {
	out := make([]views.GPUState, 0, len(a.gpus))
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
		st.SMClockMaxMHz, g.series["sm_clock_max_mhz"] = g.clockMax, g.maxFrom
		if st.SMClockMaxMHz == nil {
			st.SMClockMaxMHz, g.series["sm_clock_max_mhz"] = g.clockSeen, g.seenFrom
		}
		st.TempC, st.PowerW = g.temp, g.power
		for x := range g.xids {
			st.XIDs = append(st.XIDs, x)
		}
		sort.Ints(st.XIDs)
		// A DBE and the row it remaps are one error: the larger count.
		st.ECCDBE, st.RemappedRowsUncorrectable, st.RowRemapFailure, st.NVLinkErrors = g.dbe, g.rows, g.remap, g.nvlink
		if g.dbe != nil || g.rows != nil {
			st.ECCUncorrectable = maxPtr(g.dbe, deref0(g.rows))
		}
		st.Series = seriesRead(g.series)
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
