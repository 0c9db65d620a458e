package torchtrace

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"time"
)

// sums are a report's full tables, kept beside the JSON fields so that
// Merge adds exact sums rather than truncated top lists.
type sums struct {
	kernels map[string]*stat
	ops     map[string]*stat
	famUS   map[Family]float64
	idle    map[int]float64 // idle share per device
	top     int
}

// report turns the sums of one file into its Report.
func (a *analysis) report() *Report {
	r := &Report{Files: 1, Events: a.events}
	lo, hi, info := a.frame()
	keptLo, keptHi := a.lo, a.hi
	if a.edges != nil && (lo > a.lo || hi < a.hi) {
		var exact bool
		keptLo, keptHi, info.Outside, exact = a.cut(lo, hi)
		info.Inexact = !exact
	}
	a.attr.resolve(a)
	for name, st := range a.kernels {
		if st.count <= 0 {
			delete(a.kernels, name)
		}
	}
	for name, st := range a.ops {
		if st.count <= 0 {
			delete(a.ops, name)
		}
	}
	kept := 0
	for _, d := range a.devices {
		kept += d.n
	}
	if kept > 0 && keptLo <= keptHi {
		r.Window = Window{Start: a.wall(keptLo), End: a.wall(keptHi)}
	}
	// Idle is measured over the frame; an open end of a window is the
	// activity's own.
	if math.IsInf(lo, -1) {
		lo = keptLo
	}
	if math.IsInf(hi, 1) {
		hi = keptHi
	}
	if info.Source != "" && hi >= lo && !math.IsInf(lo, 0) && !math.IsInf(hi, 0) {
		info.Start, info.End = a.wall(lo), a.wall(hi)
		r.Frame = info
	}
	sm := &sums{kernels: a.kernels, ops: a.ops, famUS: a.famUS, idle: map[int]float64{}, top: a.opt.Top}
	for dev, d := range a.devices {
		if d.n > 0 && hi > lo {
			sm.idle[dev] = clamp01(1 - d.set.busyWithin(lo, hi)/(hi-lo))
		}
	}
	r.Attribution = a.attr.summary(kept, a.total, len(a.opNames) > 0)
	r.fill(sm)
	return r
}

func clamp01(f float64) float64 { return min(1, max(0, f)) }

// wall converts trace µs to wall-clock time (the server's clock).
func (a *analysis) wall(us float64) time.Time {
	return time.Unix(0, a.base+a.origin*1000+int64(math.Round(us*1e3))).UTC()
}

// fill sets the report's derived fields from sm.
func (r *Report) fill(sm *sums) {
	r.sums = sm
	r.KernelUS = 0
	for _, us := range sm.famUS {
		r.KernelUS += us
	}
	r.Families = make(map[Family]float64, len(Families))
	for _, f := range Families {
		r.Families[f] = share(sm.famUS[f], r.KernelUS)
	}
	r.Ranks = r.Ranks[:0]
	var idle float64
	for dev, s := range sm.idle {
		r.Ranks = append(r.Ranks, dev)
		idle += s
	}
	slices.Sort(r.Ranks)
	r.IdleShare = 0
	if len(sm.idle) > 0 {
		r.IdleShare = idle / float64(len(sm.idle))
	}
	r.TopKernels = top(sm.kernels, r.KernelUS, sm.top, true, "")
	r.TopOps = top(sm.ops, r.KernelUS, sm.top, false, "")
	r.Unclassified = top(sm.kernels, r.KernelUS, sm.top, true, FamilyOther)
}

func share(part, whole float64) float64 {
	if whole <= 0 {
		return 0
	}
	return part / whole
}

// top lists the n names with the most GPU time (of family only, when
// set), ties by name.
func top(m map[string]*stat, total float64, n int, withFamily bool, only Family) []Entry {
	out := make([]Entry, 0, len(m))
	for name, st := range m {
		if only != "" && st.fam != only {
			continue
		}
		if st.name != "" {
			name = st.name
		}
		e := Entry{Name: name, GPUus: st.us, Count: st.count, Share: share(st.us, total)}
		if withFamily {
			e.Family = st.fam
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Entry) int {
		if c := cmp.Compare(b.GPUus, a.GPUus); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	if n <= 0 {
		n = 10
	}
	if len(out) > n {
		out = out[:n]
	}
	return out
}

// Merge sums the reports of several files (the ranks of one capture) into
// one: GPU time adds up, the idle share is the mean over every device, the
// window spans them all. Reports read back from JSON merge from their top
// lists only (a kernel outside every file's top list is not listed).
func Merge(reports ...*Report) *Report {
	out := &Report{}
	sm := &sums{kernels: map[string]*stat{}, ops: map[string]*stat{}, famUS: map[Family]float64{}, idle: map[int]float64{}}
	idleN := map[int]int{}
	for _, r := range reports {
		if r == nil {
			continue
		}
		out.Files += r.Files
		out.Events += r.Events
		out.BytesRead += r.BytesRead
		out.Window = union(out.Window, r.Window)
		out.Frame = mergeFrames(out.Frame, r.Frame)
		out.Attribution = mergeAttribution(out.Attribution, r.Attribution)
		src := r.sums
		if src == nil {
			src = r.rebuild()
		}
		sm.top = max(sm.top, src.top, len(r.TopKernels))
		addStats(sm.kernels, src.kernels)
		addStats(sm.ops, src.ops)
		for f, us := range src.famUS {
			sm.famUS[f] += us
		}
		for dev, s := range src.idle {
			// Ranks of different files can share a device index (one GPU
			// per host): each file's devices count once.
			sm.idle[dev] += s
			idleN[dev]++
		}
	}
	// A device index seen in several files (each host's GPU 0) weighs as
	// many devices.
	avg := map[int]float64{}
	var all float64
	var n int
	for dev, s := range sm.idle {
		avg[dev] = s / float64(idleN[dev])
		all += s
		n += idleN[dev]
	}
	sm.idle = avg
	out.fill(sm)
	if n > 0 {
		out.IdleShare = all / float64(n)
	}
	return out
}

// addStats sums src into dst, by the names shown: a file's mangled name
// and a report read back from JSON (demangled) are one kernel.
func addStats(dst, src map[string]*stat) {
	for name, st := range src {
		if st.name != "" {
			name = st.name
		}
		d := dst[name]
		if d == nil {
			d = &stat{fam: st.fam}
			dst[name] = d
		}
		d.us += st.us
		d.count += st.count
	}
}

// rebuild recovers sums from a report's JSON fields.
func (r *Report) rebuild() *sums {
	sm := &sums{kernels: map[string]*stat{}, ops: map[string]*stat{}, famUS: map[Family]float64{}, idle: map[int]float64{}, top: len(r.TopKernels)}
	for _, e := range slices.Concat(r.TopKernels, r.Unclassified) {
		sm.kernels[e.Name] = &stat{fam: e.Family, us: e.GPUus, count: e.Count}
	}
	for _, e := range r.TopOps {
		sm.ops[e.Name] = &stat{us: e.GPUus, count: e.Count}
	}
	for f, s := range r.Families {
		sm.famUS[f] = s * r.KernelUS
	}
	for _, dev := range r.Ranks {
		sm.idle[dev] = r.IdleShare
	}
	return sm
}

// mergeFrames spans the frames of several files; the source is kept when
// they agree.
func mergeFrames(a, b FrameInfo) FrameInfo {
	if a.Source == "" {
		return b
	}
	if b.Source == "" {
		return a
	}
	w := union(Window{a.Start, a.End}, Window{b.Start, b.End})
	out := FrameInfo{Source: a.Source, Start: w.Start, End: w.End, Clipped: a.Clipped || b.Clipped,
		Outside: a.Outside + b.Outside, Inexact: a.Inexact || b.Inexact}
	if a.Source != b.Source {
		out.Source = a.Source + "+" + b.Source
	}
	return out
}

// mergeAttribution adds the counts; notes of different files are joined.
func mergeAttribution(a, b Attribution) Attribution {
	out := Attribution{Events: a.Events + b.Events, GPUus: a.GPUus + b.GPUus,
		ByExternalID: a.ByExternalID + b.ByExternalID, ByExternalIDUS: a.ByExternalIDUS + b.ByExternalIDUS,
		ByLaunch: a.ByLaunch + b.ByLaunch, ByLaunchUS: a.ByLaunchUS + b.ByLaunchUS,
		ByFrame: a.ByFrame + b.ByFrame, ByFrameUS: a.ByFrameUS + b.ByFrameUS,
		ByGraph: a.ByGraph + b.ByGraph, ByGraphUS: a.ByGraphUS + b.ByGraphUS,
		BeforeFrame: a.BeforeFrame + b.BeforeFrame, BeforeFrameUS: a.BeforeFrameUS + b.BeforeFrameUS,
		ByKernelName: a.ByKernelName + b.ByKernelName, ByKernelNameUS: a.ByKernelNameUS + b.ByKernelNameUS,
		Uncredited: a.Uncredited + b.Uncredited, UncreditedUS: a.UncreditedUS + b.UncreditedUS, Note: a.Note}
	switch {
	case out.Note == "":
		out.Note = b.Note
	case b.Note != "" && b.Note != a.Note:
		out.Note += " | " + b.Note
	}
	return out
}

func union(a, b Window) Window {
	switch {
	case a.Start.IsZero():
		return b
	case b.Start.IsZero():
		return a
	}
	if b.Start.Before(a.Start) {
		a.Start = b.Start
	}
	if b.End.After(a.End) {
		a.End = b.End
	}
	return a
}

// minDelta is the smallest change of share Compare reports (half a point).
const minDelta = 0.005

// Compare lists the families whose share moved by at least half a point,
// largest change first (ties in Families order), e.g. gemm 0.81 vs
// baseline 0.38.
func Compare(cur, base *Report) []Delta {
	if cur == nil || base == nil {
		return nil
	}
	var out []Delta
	for _, f := range Families {
		d := Delta{Family: f, Share: cur.Families[f], Baseline: base.Families[f]}
		if math.Abs(d.Share-d.Baseline) >= minDelta {
			out = append(out, d)
		}
	}
	slices.SortStableFunc(out, func(a, b Delta) int {
		return cmp.Compare(math.Abs(b.Share-b.Baseline), math.Abs(a.Share-a.Baseline))
	})
	return out
}
