package torchtrace

import (
	"bytes"
	"math"
)

// The frame: which stretch of the trace a report covers.
//
// It comes from the trace itself: the profiler's span, the `cat: "Trace"`
// event "PyTorch Profiler (N)" that Kineto writes from its
// captureWindowStartTime_ (libkineto GenericActivityProfiler.cpp,
// handleTraceSpan in output_json.cpp), else the extent of the GPU activity
// (HTA's temporal breakdown reads from the first kernel to the last). It is
// never placed from baseTimeNanoseconds: Kineto's ChromeTraceBaseTime
// (output_json.h) is the clock floored to a 7,889,238 s (3-month) boundary,
// weeks before the events. Options.Frame, the frame as the caller measured
// it on its own clock, clips the span to at most that long from its start.
//
// Kineto writes the span near the end of traceEvents, after the GPU events,
// and until 2025-03 wrote baseTimeNanoseconds after them too (84d95b82 to
// 08fcb941), so the frame is known only at the end of a single pass. Every
// GPU event is summed whole as it is read; the maxEdge events that start
// first and the maxEdge that end last are kept aside, and at the end the part
// of them outside the frame is taken back out. That is exact unless more
// than maxEdge events lie outside the frame on one side (Kineto itself drops
// GPU activity outside its capture window, GenericActivityProfiler::
// outOfRange, so on its traces none do); then FrameInfo.Inexact says so.

// maxEdge is how many GPU events are kept at each end of the trace (~56
// bytes each: 3.5 MiB for both).
const maxEdge = 1 << 15

// gpuRec is one GPU event kept at an end.
type gpuRec struct {
	ts, end float64
	st      *stat
	ref     creditRef
	seq     int64
	dev     int32
}

// edges are the GPU events that start first (early, a max-heap on ts) and
// end last (late, a min-heap on end).
type edges struct {
	early, late heap
}

func newEdges(n int) *edges {
	return &edges{
		early: heap{n: n, less: func(a, b *gpuRec) bool { return a.ts > b.ts }},
		late:  heap{n: n, less: func(a, b *gpuRec) bool { return a.end < b.end }},
	}
}

func (e *edges) add(r gpuRec) {
	e.early.offer(r)
	e.late.offer(r)
}

// heap keeps the n most extreme records; its top (recs[0]) is the least
// extreme kept: less(top, x) for x the more extreme.
type heap struct {
	recs    []gpuRec
	n       int
	less    func(a, b *gpuRec) bool // a is nearer the top (less extreme) than b
	evicted bool                    // some record was not kept
}

func (h *heap) offer(r gpuRec) {
	if len(h.recs) < h.n {
		h.recs = append(h.recs, r)
		h.up(len(h.recs) - 1)
		return
	}
	h.evicted = true
	if h.n == 0 || !h.less(&h.recs[0], &r) {
		return
	}
	h.recs[0] = r
	h.down(0)
}

func (h *heap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(&h.recs[i], &h.recs[p]) {
			return
		}
		h.recs[i], h.recs[p] = h.recs[p], h.recs[i]
		i = p
	}
}

func (h *heap) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(h.recs) {
			return
		}
		m := l
		if r := l + 1; r < len(h.recs) && h.less(&h.recs[r], &h.recs[l]) {
			m = r
		}
		if !h.less(&h.recs[m], &h.recs[i]) {
			return
		}
		h.recs[i], h.recs[m] = h.recs[m], h.recs[i]
		i = m
	}
}

// spans are the profiler's own spans read: "PyTorch Profiler (N)" (one per
// iteration of an on-demand trace; their union), and any other Trace span
// for traces without one.
type spans struct {
	torch, other [2]float64 // lo, hi; lo > hi while unset
}

func newSpans() spans {
	unset := [2]float64{math.Inf(1), math.Inf(-1)}
	return spans{torch: unset, other: unset}
}

var torchSpan = []byte("PyTorch Profiler")

func (s *spans) add(name []byte, ts, dur float64) {
	p := &s.other
	if bytes.HasPrefix(name, torchSpan) {
		p = &s.torch
	}
	p[0], p[1] = min(p[0], ts), max(p[1], ts+dur)
}

// frame is the stretch, in trace µs, the report covers.
func (a *analysis) frame() (lo, hi float64, info FrameInfo) {
	switch {
	case a.eager || !a.opt.Window.Start.IsZero() || !a.opt.Window.End.IsZero():
		lo, hi = a.windowMicros()
		info.Source = FrameWindow
		return lo, hi, info
	case a.spans.torch[0] <= a.spans.torch[1]:
		lo, hi, info.Source = a.spans.torch[0], a.spans.torch[1], FrameSpan
	case a.spans.other[0] <= a.spans.other[1]:
		lo, hi, info.Source = a.spans.other[0], a.spans.other[1], FrameSpan
	case a.lo <= a.hi:
		lo, hi, info.Source = a.lo, a.hi, FrameGPU
	default:
		return math.Inf(-1), math.Inf(1), info
	}
	if f := float64(a.opt.Frame.Nanoseconds()) / 1e3; f > 0 && hi-lo > f {
		hi, info.Clipped = lo+f, true
	}
	return lo, hi, info
}

// cut takes out of the sums what lies outside [lo, hi] among the events kept
// at the ends, and returns the extent of what stays. exact is false when
// more events lay outside on one side than were kept.
func (a *analysis) cut(lo, hi float64) (keptLo, keptHi float64, outside int, exact bool) {
	e := a.edges
	keptLo, keptHi = math.Inf(1), math.Inf(-1)
	exact = true
	if e.early.evicted && len(e.early.recs) > 0 && e.early.recs[0].ts < lo {
		exact = false
	}
	if e.late.evicted && len(e.late.recs) > 0 && e.late.recs[0].end > hi {
		exact = false
	}
	seen := make(map[int64]bool, len(e.early.recs)+len(e.late.recs))
	for _, h := range []*heap{&e.early, &e.late} {
		for i := range h.recs {
			r := &h.recs[i]
			if seen[r.seq] {
				continue
			}
			seen[r.seq] = true
			dur := r.end - r.ts
			in0, in1 := max(r.ts, lo), min(r.end, hi)
			if in1 < in0 || (in1 == in0 && dur > 0) {
				a.take(r, dur, 1)
				outside++
				continue
			}
			keptLo, keptHi = min(keptLo, in0), max(keptHi, in1)
			if c := dur - (in1 - in0); c > 0 {
				a.take(r, c, 0)
			}
		}
	}
	// Events never kept aside lie inside [their heap's top]: they bound the
	// extent when the kept ones do not reach it.
	if e.early.evicted && len(e.early.recs) > 0 {
		keptLo = min(keptLo, min(max(e.early.recs[0].ts, lo), hi))
	}
	if e.late.evicted && len(e.late.recs) > 0 {
		keptHi = max(keptHi, max(min(e.late.recs[0].end, hi), lo))
	}
	return keptLo, keptHi, outside, exact
}

// take removes us of one event's time (and the event itself when count is
// 1) from every sum it went into.
func (a *analysis) take(r *gpuRec, us float64, count int) {
	r.st.us = max(0, r.st.us-us)
	r.st.count -= count
	a.famUS[r.st.fam] = max(0, a.famUS[r.st.fam]-us)
	a.total = max(0, a.total-us)
	if count > 0 {
		a.devices[int(r.dev)].n--
	}
	a.attr.uncredit(a, r.ref, r.st, us, count)
}
