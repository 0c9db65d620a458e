package torchtrace

import (
	"cmp"
	"slices"
)

// Attribution: which CPU operator launched each GPU event. Kineto links a
// GPU event twice: "External id" (the innermost cpu_op at the launch) and
// "correlation" (the runtime call that launched it). Some writers put the
// event's own correlation in "External id", where reading it as an
// operator's id credits the wrong one, so:
//   - an External id that differs from the correlation names the operator;
//   - else correlation → the runtime call → the innermost cpu_op enclosing
//     it on its thread (the walk HTA and PyTorch's profiler plugin do);
//   - a kernel replayed from a CUDA/HIP graph carries the graph launch's
//     correlation: it is credited to the launch and what encloses it, and a
//     kernel launched before the recording (no runtime call in the trace) is
//     counted apart and credited by its name (graphs.go);
//   - what none credits is counted, with the reason.
//
// Launches are read by category (cuda_runtime, which roctracer uses for HIP
// too, and cuda_driver for Triton and TensorRT-LLM-gen cubins), never by the
// call's name, so a new launch API needs no new rule.

// Bounds of the launch walk (it is needed only on traces whose runtime calls
// carry their own correlation as External id).
const (
	// maxLaunches bounds the runtime calls kept by correlation (~40 bytes
	// each in the map).
	maxLaunches = 1 << 18
	// maxOpIntervals bounds the operator intervals kept for the walk (32
	// bytes each, 16 MiB).
	maxOpIntervals = 1 << 19
)

// Why a GPU event was not credited.
const (
	reasonNoLink    = iota // neither an External id nor a correlation
	reasonNoOp             // its External id names no operator in the trace
	reasonNoLaunch         // no runtime call carries its correlation
	reasonNoEnclose        // no operator encloses its runtime call
	reasonBound            // past the walk's bounds
	nReasons
)

var reasonText = [nReasons]string{
	"no External id or correlation",
	"External id names no operator in the trace",
	"no runtime call with their correlation",
	"no operator encloses their launch",
	"past the attribution bounds",
}

// creditKind says where a GPU event's time went, so that a cut at the
// frame's ends can take it back.
type creditKind uint8

const (
	creditNone   creditKind = iota // key: the reason
	creditOp                       // key: the operator's index
	creditExt                      // key: the External id, awaiting its operator
	creditLaunch                   // key: the correlation, awaiting the walk
)

type creditRef struct {
	kind creditKind
	key  int64
}

// launch is a runtime call awaiting the walk.
type launch struct {
	thread uint16
	ts     float64
}

// opInterval is a cpu_op on its thread, for the walk. seq is its External
// id: Kineto numbers operators as they start (the RecordFunction's handle),
// so of two with the same start and end (torch::distributed::reducer::mul_out
// and the aten::mul it runs, in hta/trace_filter) the larger id is the inner.
type opInterval struct {
	ts     float64
	dur    float64
	seq    int64
	op     uint16 // an operator's index, or a frame's (frame set)
	thread uint16
	frame  bool // a user_annotation or python_function (graphs.go)
}

func (o opInterval) end() float64 { return o.ts + float64(o.dur) }

// attributor holds the links while a file is read.
type attributor struct {
	opOf       *linkTable       // External id → operator
	pendExt    map[int64]pend   // External id → GPU time awaiting its operator
	pendLaunch map[int64]pend   // correlation → GPU time awaiting the walk
	launches   map[int64]launch // correlation → runtime call, where its External id is its own
	threads    map[[2]int64]uint16
	opIvs      []opInterval
	byExt      credits
	byLaunch   credits
	reasons    [nReasons]int
	graphState // graph launches, frames, launches before the frame
}

// credits counts the GPU events one method credited, and their time.
type credits struct {
	n  int
	us float64
}

func (c *credits) add(n int, us float64) {
	c.n += n
	c.us += us
}

func newAttributor() *attributor {
	return &attributor{opOf: newLinkTable(), pendExt: map[int64]pend{}, pendLaunch: map[int64]pend{},
		launches: map[int64]launch{}, threads: map[[2]int64]uint16{}, graphState: newGraphState()}
}

// credit files us of GPU time of one event under its operator, or where it
// waits for one.
func (at *attributor) credit(a *analysis, st *stat, us float64, ext, corr int64) creditRef {
	if ext != 0 && ext != corr {
		if op, ok := at.opOf.get(ext); ok {
			a.opStat(op).add(us)
			st.vote(op, 1)
			at.byExt.add(1, us)
			return creditRef{creditOp, int64(op)}
		}
		if p, ok := at.pendExt[ext]; ok || len(at.pendExt) < maxPending {
			at.pendExt[ext] = p.with(st, us)
			return creditRef{creditExt, ext}
		}
		at.reasons[reasonBound]++
		return creditRef{creditNone, reasonBound}
	}
	if corr == 0 {
		at.reasons[reasonNoLink]++
		return creditRef{creditNone, reasonNoLink}
	}
	if p, ok := at.pendLaunch[corr]; ok || len(at.pendLaunch) < maxPending {
		at.pendLaunch[corr] = p.with(st, us)
		return creditRef{creditLaunch, corr}
	}
	at.reasons[reasonBound]++
	return creditRef{creditNone, reasonBound}
}

// uncredit takes back us of GPU time (and count events) credited by ref: a
// GPU event cut, or cut short, at the frame's ends.
func (at *attributor) uncredit(a *analysis, ref creditRef, kernel *stat, us float64, count int) {
	take := func(st *stat) {
		st.us = max(0, st.us-us)
		st.count -= count
	}
	switch ref.kind {
	case creditNone:
		at.reasons[ref.key] -= count
	case creditOp:
		take(a.opStat(int32(ref.key)))
		kernel.vote(int32(ref.key), -count)
		at.byExt.add(-count, -us)
	case creditExt:
		if p, ok := at.pendExt[ref.key]; ok {
			at.pendExt[ref.key] = p.less(us, count)
		} else if op, ok := at.opOf.get(ref.key); ok {
			take(a.opStat(op))
			at.byExt.add(-count, -us)
		}
	case creditLaunch:
		if p, ok := at.pendLaunch[ref.key]; ok {
			at.pendLaunch[ref.key] = p.less(us, count)
		}
	}
}

// operator links an operator's External id and keeps its interval.
func (at *attributor) operator(a *analysis, idx int32, pid, tid int64, ts, dur float64, ext int64) {
	if ext != 0 {
		if p, ok := at.pendExt[ext]; ok {
			st := a.opStat(idx)
			st.us += p.us
			st.count += int(p.count)
			p.vote(idx)
			at.byExt.add(int(p.count), p.us)
			delete(at.pendExt, ext)
		}
		at.opOf.set(ext, idx)
	}
	if at.nOps >= maxOpIntervals {
		return
	}
	th, ok := at.thread(pid, tid)
	if !ok {
		return
	}
	at.opIvs = append(at.opIvs, opInterval{ts: ts, dur: dur, seq: ext, op: uint16(idx), thread: th})
	at.nOps++
}

// launch reads a runtime call: kept for the walk when its External id is
// its own correlation (or absent).
func (at *attributor) launch(name []byte, pid, tid int64, ts float64, ext, corr int64) {
	if corr == 0 {
		return
	}
	at.sawLaunch(corr)
	if isGraphLaunch(name) {
		at.graphLaunch(name, pid, tid, ts, ext, corr)
		return
	}
	if ext != 0 && ext != corr {
		// Its kernels carry the operator's External id: no walk needed. The
		// operator intervals are kept all the same: a graph launch later in
		// the file needs them.
		return
	}
	if len(at.launches) >= maxLaunches {
		return
	}
	if th, ok := at.thread(pid, tid); ok {
		at.launches[corr] = launch{thread: th, ts: ts}
	}
}

func (at *attributor) thread(pid, tid int64) (uint16, bool) {
	k := [2]int64{pid, tid}
	if th, ok := at.threads[k]; ok {
		return th, true
	}
	if len(at.threads) >= 1<<16-1 {
		return 0, false
	}
	th := uint16(len(at.threads))
	at.threads[k] = th
	return th, true
}

// query is a walk to do: the GPU time p launched at ts on a thread (by a
// graph launch when graph is set).
type query struct {
	ts    float64
	p     pend
	graph *graphLaunch
}

// resolve ends the file: what still awaits its operator is walked or
// counted as not credited.
func (at *attributor) resolve(a *analysis) {
	for _, p := range at.pendExt {
		at.reasons[reasonNoOp] += int(p.count)
	}
	at.pendExt = nil
	byThread := map[uint16][]query{}
	var before []pend
	for corr, p := range at.pendLaunch {
		if p.count <= 0 {
			continue
		}
		l, ok := at.launches[corr]
		switch {
		case ok:
			byThread[l.thread] = append(byThread[l.thread], query{ts: l.ts, p: p})
		case at.graphQuery(corr, p, byThread):
		case at.beforeFrame(corr):
			before = append(before, p)
		default:
			at.reasons[reasonNoLaunch] += int(p.count)
		}
	}
	at.pendLaunch, at.launches = nil, nil
	defer at.creditBefore(a, before)
	if len(byThread) == 0 {
		return
	}
	ops := at.opIvs
	slices.SortFunc(ops, func(x, y opInterval) int {
		if c := cmp.Compare(x.thread, y.thread); c != 0 {
			return c
		}
		if c := cmp.Compare(x.ts, y.ts); c != 0 {
			return c
		}
		if c := cmp.Compare(y.end(), x.end()); c != 0 {
			return c // the outer first: the inner ends on top
		}
		if x.frame != y.frame {
			return cmpBool(y.frame, x.frame) // a frame encloses the operator it runs
		}
		return cmp.Compare(x.seq, y.seq)
	})
	for th, qs := range byThread {
		lo, _ := slices.BinarySearchFunc(ops, th, func(o opInterval, t uint16) int { return cmp.Compare(o.thread, t) })
		hi := lo
		for hi < len(ops) && ops[hi].thread == th {
			hi++
		}
		at.walk(a, ops[lo:hi], qs)
	}
	at.opIvs = nil
}

// walk credits each query to the innermost operator of ops (one thread's,
// sorted by start, the outer first) enclosing its time.
func (at *attributor) walk(a *analysis, ops []opInterval, qs []query) {
	slices.SortFunc(qs, func(x, y query) int { return cmp.Compare(x.ts, y.ts) })
	var stack []opInterval
	i := 0
	for _, q := range qs {
		for i < len(ops) && ops[i].ts <= q.ts {
			for len(stack) > 0 && stack[len(stack)-1].end() < ops[i].ts {
				stack = stack[:len(stack)-1]
			}
			stack = append(stack, ops[i])
			i++
		}
		for len(stack) > 0 && stack[len(stack)-1].end() < q.ts {
			stack = stack[:len(stack)-1]
		}
		if q.graph != nil {
			at.creditGraph(a, q, stack)
			continue
		}
		op, ok := innermostOp(stack)
		method := &at.byLaunch
		if !ok && len(stack) > 0 {
			// No operator: the Python frame or annotation that launched it
			// (a Triton kernel called from Python, a library's own launch).
			op, ok, method = a.internOp([]byte(at.frameNames[stack[len(stack)-1].op])), true, &at.byFrame
		}
		if !ok {
			at.reasons[reasonNoEnclose] += int(q.p.count)
			continue
		}
		st := a.opStat(op)
		st.us += q.p.us
		st.count += int(q.p.count)
		q.p.vote(op)
		method.add(int(q.p.count), q.p.us)
	}
}

// innermostOp is the innermost operator (not a frame) on a stack of
// enclosing intervals.
func innermostOp(stack []opInterval) (int32, bool) {
	for i := len(stack) - 1; i >= 0; i-- {
		if !stack[i].frame {
			return int32(stack[i].op), true
		}
	}
	return 0, false
}

func cmpBool(x, y bool) int {
	switch {
	case x == y:
		return 0
	case x:
		return 1
	}
	return -1
}
