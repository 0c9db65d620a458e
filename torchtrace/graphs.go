package torchtrace

import (
	"bytes"
	"strings"
)

// Kernels replayed from a CUDA or HIP graph, and kernels launched before
// the recording began.
//
// A graph replay runs every kernel the graph captured, each correlated to
// the one cudaGraphLaunch / hipGraphLaunch call (vLLM's decode step under a
// full CUDA graph: one launch, 421 kernels) and carrying no External id:
// the operators that captured them ran at capture time, not in this trace.
// Such a kernel is credited to the graph launch and to what encloses the
// launch on its thread: the innermost cpu_op, user_annotation or Python
// frame (python_function: vLLM's gpu_model_runner.py _model_forward, a
// model's forward under piecewise graphs), skipping the frames that only
// replay a graph (torch/, vllm/compilation/, built-ins), which name no step
// a reader could act on.
//
// A kernel launched before the profiler started (the GPU still working
// through the previous step's queue when the recording began) has no
// runtime call in the trace. CUPTI and roctracer number correlations in
// launch order, so one below every runtime call's correlation was launched
// before the frame. It is counted apart, and credited to the operator
// credited with the most instances of the same kernel in the frame (each
// launched on its own: by External id or the launch walk; ties by name): a
// step repeats its kernels.

// Bounds of the graph and frame bookkeeping.
const (
	// maxGraphLaunches bounds the graph launches kept by correlation.
	maxGraphLaunches = 1 << 16
	// maxFrameIntervals bounds the user_annotation and python_function
	// intervals kept (32 bytes each, 8 MiB).
	maxFrameIntervals = 1 << 18
)

// graphState is the attributor's part for graph launches, frames and
// launches before the frame.
type graphState struct {
	graphs     map[int64]*graphLaunch // correlation → graph launch
	frameNames []string
	frameIndex map[string]int32 // -1: a replay frame (replayFrame)
	nOps       int              // operator intervals kept
	nFrames    int              // frame intervals kept
	minCorr    int64
	corrSeen   bool
	byFrame    credits // launch walk ending at a frame, no operator
	byGraph    credits // replayed from a graph
	before     credits // launched before the frame
	byName     credits // … of which credited by kernel name
}

func newGraphState() graphState {
	return graphState{graphs: map[int64]*graphLaunch{}, frameIndex: map[string]int32{}}
}

// graphLaunch is one cudaGraphLaunch / hipGraphLaunch call.
type graphLaunch struct {
	api    string
	ext    int64 // the enclosing operator's External id, when it has one
	ts     float64
	thread uint16
}

// isGraphLaunch: cudaGraphLaunch, hipGraphLaunch, cuGraphLaunch.
func isGraphLaunch(name []byte) bool { return bytes.HasSuffix(name, []byte("GraphLaunch")) }

func (at *attributor) sawLaunch(corr int64) {
	if !at.corrSeen || corr < at.minCorr {
		at.minCorr, at.corrSeen = corr, true
	}
}

// beforeFrame: no runtime call carries corr, and it is below every one's.
func (at *attributor) beforeFrame(corr int64) bool { return at.corrSeen && corr < at.minCorr }

func (at *attributor) graphLaunch(name []byte, pid, tid int64, ts float64, ext, corr int64) {
	if len(at.graphs) >= maxGraphLaunches {
		return
	}
	th, ok := at.thread(pid, tid)
	if !ok {
		return
	}
	g := &graphLaunch{api: string(name), ts: ts, thread: th}
	if ext != corr {
		g.ext = ext
	}
	at.graphs[corr] = g
}

// graphQuery queues the kernels p replayed by the graph launch corr, if it
// is one.
func (at *attributor) graphQuery(corr int64, p pend, byThread map[uint16][]query) bool {
	g := at.graphs[corr]
	if g == nil {
		return false
	}
	byThread[g.thread] = append(byThread[g.thread], query{ts: g.ts, p: p, graph: g})
	return true
}

// creditGraph credits a graph's kernels to "<launch> in <what encloses it>"
// (stack: the intervals enclosing the launch, the innermost last).
func (at *attributor) creditGraph(a *analysis, q query, stack []opInterval) {
	name := q.graph.api
	encl := ""
	if op, ok := at.opOf.get(q.graph.ext); ok && q.graph.ext != 0 {
		encl = a.opNames[op]
	} else if len(stack) > 0 {
		in := stack[len(stack)-1]
		if in.frame {
			encl = at.frameNames[in.op]
		} else {
			encl = a.opNames[in.op]
		}
	}
	if encl != "" {
		name += " in " + encl
	}
	idx := a.internOp([]byte(name))
	st := a.opStat(idx)
	st.us += q.p.us
	st.count += int(q.p.count)
	at.byGraph.add(int(q.p.count), q.p.us)
}

// creditBefore counts the kernels launched before the frame and credits
// each to the operator that most often launched its kernel in the frame.
func (at *attributor) creditBefore(a *analysis, before []pend) {
	for _, p := range before {
		at.before.add(int(p.count), p.us)
		if p.mixed || p.st == nil {
			continue
		}
		op, ok := p.st.mostCredited(a.opNames)
		if !ok {
			continue
		}
		st := a.opStat(op)
		st.us += p.us
		st.count += int(p.count)
		at.byName.add(int(p.count), p.us)
	}
}

// frame keeps a user_annotation or python_function interval, for graph
// launches to be credited to.
func (at *attributor) frame(name []byte, pid, tid int64, ts, dur float64) {
	if at.nFrames >= maxFrameIntervals {
		return
	}
	idx, ok := at.frameIndex[string(name)]
	if !ok {
		if len(at.frameIndex) >= 2*maxNames {
			return
		}
		key := string(name)
		idx = -1 // the replay machinery, or past the names kept: never kept
		if !replayFrame(key) && len(at.frameNames) < maxNames {
			idx = int32(len(at.frameNames))
			at.frameNames = append(at.frameNames, key)
		}
		at.frameIndex[key] = idx
	}
	if idx < 0 {
		return
	}
	th, ok := at.thread(pid, tid)
	if !ok {
		return
	}
	at.opIvs = append(at.opIvs, opInterval{ts: ts, dur: dur, op: uint16(idx), thread: th, frame: true})
	at.nFrames++
}

// replayFrame says whether a Python frame only replays a graph or runs
// PyTorch's own machinery: built-ins and generated code (<built-in method
// replay …>, <eval_with_key>.50), torch/ (torch/cuda/graphs.py replay,
// torch/nn/modules/module.py _call_impl), nn.Module: GraphModule_0 (an FX
// graph), vllm/compilation/ (cuda_graph.py __call__, the piecewise
// backend), triton/ (its launcher, driver.py __call__) and SGLang's
// cuda_graph_runner.py replay.
func replayFrame(s string) bool {
	if strings.HasPrefix(s, "<") || strings.HasPrefix(s, "nn.Module: GraphModule") {
		return true
	}
	for _, root := range []string{"site-packages/", "dist-packages/"} {
		if i := strings.LastIndex(s, root); i >= 0 {
			s = s[i+len(root):]
		}
	}
	return strings.HasPrefix(s, "torch/") || strings.HasPrefix(s, "vllm/compilation/") || strings.HasPrefix(s, "triton/") ||
		strings.Contains(s, "cuda_graph_runner.py")
}

// maxVotes bounds the operators counted per kernel name for the credit by
// name (8 × 8 bytes per name); past it, further operators are not counted.
const maxVotes = 8

// opVotes is how many of a kernel's instances each operator was credited
// with.
type opVotes struct {
	op int32
	n  int32
}

// vote counts n more (or, negative, fewer) of this kernel's instances
// credited to op.
func (st *stat) vote(op int32, n int) {
	for i := range st.votes {
		if st.votes[i].op == op {
			st.votes[i].n += int32(n)
			return
		}
	}
	if n > 0 && len(st.votes) < maxVotes {
		st.votes = append(st.votes, opVotes{op, int32(n)})
	}
}

// mostCredited is the operator credited with the most of this kernel's
// instances, ties by name.
func (st *stat) mostCredited(names []string) (int32, bool) {
	best, bestN := int32(-1), int32(0)
	for _, v := range st.votes {
		if v.n > bestN || (v.n == bestN && v.n > 0 && names[v.op] < names[best]) {
			best, bestN = v.op, v.n
		}
	}
	return best, best >= 0
}

// pend is what kernels under one id took before they could be credited;
// st is their kernel's sums (mixed: they were several kernels).
type pend struct {
	us    float64
	count int32
	mixed bool
	st    *stat
}

func (p pend) with(st *stat, us float64) pend {
	if p.count > 0 && p.st != st {
		p.mixed = true
	}
	p.st, p.us, p.count = st, p.us+us, p.count+1
	return p
}

func (p pend) less(us float64, count int) pend {
	p.us, p.count = max(0, p.us-us), p.count-int32(count)
	return p
}

// vote records that p's kernel was credited to op (not when p holds
// several kernels: a graph replay, an operator's several launches).
func (p pend) vote(op int32) {
	if !p.mixed && p.st != nil {
		p.st.vote(op, int(p.count))
	}
}
