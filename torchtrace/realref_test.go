package torchtrace

import (
	"bytes"
	"cmp"
	"encoding/json"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
)

// A reference reading of a Kineto trace for the real-trace tests, written
// apart from the streaming analysis and as plainly as possible: the whole
// file decoded with encoding/json, times as integer nanoseconds, kernels
// summed by name, the busy union per device by sorting, and every GPU event
// credited by HTA's walk (correlation → runtime call → the innermost cpu_op
// enclosing it on its thread, found by scanning), falling back to the
// event's External id where no runtime call carries its correlation. A
// kernel whose runtime call is a graph launch is credited to
// "<launch> in <innermost cpu_op, user_annotation or Python frame enclosing
// it>" (frames that only replay a graph skipped); one whose correlation is
// below every runtime call's was launched before the frame, and is credited
// to the operator credited most often with the same kernel in the frame,
// counting kernels launched on their own (not from a graph; ties by name). Only the kernel-name classification (Classify) is shared:
// it is held to real names by TestClassifyRealNames.

// refDoc is a trace decoded whole.
type refDoc struct {
	Base   *int64     `json:"baseTimeNanoseconds"`
	Events []refEvent `json:"traceEvents"`
}

type refEvent struct {
	Ph   string      `json:"ph"`
	Cat  string      `json:"cat"`
	Name string      `json:"name"`
	Pid  any         `json:"pid"`
	Tid  any         `json:"tid"`
	Ts   json.Number `json:"ts"`
	Dur  json.Number `json:"dur"`
	Args struct {
		Ext   *json.Number `json:"External id"`
		Ext19 *json.Number `json:"external id"`
		Corr  *json.Number `json:"correlation"`
	} `json:"args"`
}

// ns is a decimal µs count as integer nanoseconds (exact to the ns).
func ns(n json.Number) int64 {
	s := string(n)
	if s == "" {
		return 0
	}
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	ip, frac, _ := strings.Cut(s, ".")
	v, _ := strconv.ParseInt(ip, 10, 64)
	frac = (frac + "000")[:3]
	f, _ := strconv.ParseInt(frac, 10, 64)
	out := v*1000 + f
	if neg {
		return -out
	}
	return out
}

func id(n *json.Number) int64 {
	if n == nil {
		return 0
	}
	v, _ := n.Int64()
	if v == 0 {
		f, _ := n.Float64()
		v = int64(f)
	}
	return v
}

func key(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case json.Number: // decoded with UseNumber
		return x.String()
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	}
	return ""
}

// refFigures are what the reference reads over a frame.
type refFigures struct {
	frameLo, frameHi int64 // ns on the trace's clock
	kernels          map[string]*stat
	ops              map[string]float64 // operator → GPU µs credited
	events, credited int
	before, byName   int // launched before the frame; of them credited by name
	idle             float64
	kernelUS         float64
	famUS            map[Family]float64
}

func decodeRef(t testing.TB, data []byte) refDoc {
	t.Helper()
	var r io.Reader = bytes.NewReader(data)
	if len(data) > 2 && data[0] == 0x1f && data[1] == 0x8b {
		zr, err := gzip.NewReader(r)
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	}
	var doc refDoc
	dec := json.NewDecoder(r)
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("reference decode: %v", err)
	}
	return doc
}

// span is the "PyTorch Profiler" span in absolute ns.
func (d refDoc) span() (lo, hi int64, ok bool) {
	base := int64(0)
	if d.Base != nil {
		base = *d.Base
	}
	for _, e := range d.Events {
		if e.Ph == "X" && strings.EqualFold(e.Cat, "trace") && strings.HasPrefix(e.Name, "PyTorch Profiler") {
			return base + ns(e.Ts), base + ns(e.Ts) + ns(e.Dur), true
		}
	}
	return 0, 0, false
}

// figures reads d over [lo, hi] (absolute ns).
func (d refDoc) figures(lo, hi int64) refFigures {
	base := int64(0)
	if d.Base != nil {
		base = *d.Base
	}
	f := refFigures{frameLo: lo, frameHi: hi, kernels: map[string]*stat{}, ops: map[string]float64{}, famUS: map[Family]float64{}}
	type iv struct{ lo, hi int64 }
	type op struct {
		lo, hi, ext int64
		name        string
	}
	busy := map[string][]iv{}
	opsByThread := map[string][]op{}
	framesByThread := map[string][]op{} // cpu_ops, annotations and Python frames
	opByExt := map[int64]string{}
	runtime := map[int64]refEvent{}
	minCorr := int64(math.MaxInt64)
	for _, e := range d.Events {
		if e.Ph != "X" {
			continue
		}
		k := key(e.Pid) + "/" + key(e.Tid)
		switch strings.ToLower(e.Cat) {
		case "cpu_op", "operator", "user_annotation", "python_function":
			if !refReplayFrame(e.Name) {
				t0 := base + ns(e.Ts)
				framesByThread[k] = append(framesByThread[k], op{t0, t0 + ns(e.Dur), max(id(e.Args.Ext), id(e.Args.Ext19)), e.Name})
			}
		}
		switch strings.ToLower(e.Cat) {
		case "cpu_op", "operator":
			t0 := base + ns(e.Ts)
			k := key(e.Pid) + "/" + key(e.Tid)
			opsByThread[k] = append(opsByThread[k], op{t0, t0 + ns(e.Dur), max(id(e.Args.Ext), id(e.Args.Ext19)), e.Name})
			if x := id(e.Args.Ext); x != 0 {
				opByExt[x] = e.Name
			} else if x := id(e.Args.Ext19); x != 0 {
				opByExt[x] = e.Name
			}
		case "cuda_runtime", "cuda_driver", "runtime":
			runtime[id(e.Args.Corr)] = e
			minCorr = min(minCorr, id(e.Args.Corr))
		}
	}
	for _, ops := range framesByThread {
		slices.SortFunc(ops, func(x, y op) int { return cmp.Compare(x.lo, y.lo) })
	}
	for _, ops := range opsByThread {
		slices.SortFunc(ops, func(x, y op) int {
			if c := cmp.Compare(x.lo, y.lo); c != 0 {
				return c
			}
			if c := cmp.Compare(y.hi, x.hi); c != 0 {
				return c
			}
			return cmp.Compare(x.ext, y.ext)
		})
	}
	// The innermost enclosing operator is the latest-starting one that
	// still runs at t0 (of equal starts, the shortest: the last in order;
	// of equal intervals, the one that started last, by External id).
	enclosing := func(r refEvent) string {
		t0 := base + ns(r.Ts)
		ops := opsByThread[key(r.Pid)+"/"+key(r.Tid)]
		i, _ := slices.BinarySearchFunc(ops, t0+1, func(o op, t int64) int { return cmp.Compare(o.lo, t) })
		for i--; i >= 0; i-- {
			if ops[i].hi >= t0 {
				return ops[i].name
			}
		}
		return ""
	}
	// A graph launch's encloser: its operator's External id, else the
	// shortest interval of any kind around it on its thread.
	graphEncloser := func(r refEvent) string {
		if x := id(r.Args.Ext); x != 0 && x != id(r.Args.Corr) && opByExt[x] != "" {
			return opByExt[x]
		}
		t0 := base + ns(r.Ts)
		best, bestLen := "", int64(math.MaxInt64)
		for _, o := range framesByThread[key(r.Pid)+"/"+key(r.Tid)] {
			if o.lo <= t0 && o.hi >= t0 && o.hi-o.lo < bestLen {
				best, bestLen = o.name, o.hi-o.lo
			}
		}
		return best
	}
	type early struct {
		kernel string
		us     float64
	}
	var before []early
	votes := map[string]map[string]int{} // kernel → operator → credits
	for _, e := range d.Events {
		c := strings.ToLower(e.Cat)
		if e.Ph != "X" || (c != "kernel" && c != "gpu_memcpy" && c != "gpu_memset" && c != "memcpy" && c != "memset") {
			continue
		}
		t0, dur := base+ns(e.Ts), ns(e.Dur)
		a, b := max(t0, lo), min(t0+dur, hi)
		if b < a || (b == a && dur > 0) {
			continue
		}
		us := float64(b-a) / 1e3
		st := f.kernels[e.Name]
		if st == nil {
			st = &stat{fam: Classify(e.Cat, e.Name)}
			f.kernels[e.Name] = st
		}
		st.us += us
		st.count++
		f.famUS[st.fam] += us
		f.kernelUS += us
		f.events++
		if busy[key(e.Pid)] == nil {
			busy[key(e.Pid)] = []iv{}
		}
		lower := strings.ToLower(e.Name)
		if c == "kernel" && !strings.HasPrefix(lower, "memcpy") && !strings.HasPrefix(lower, "memset") {
			busy[key(e.Pid)] = append(busy[key(e.Pid)], iv{a, b})
		}
		corr := id(e.Args.Corr)
		name := ""
		r, ok := runtime[corr]
		switch x := max(id(e.Args.Ext), id(e.Args.Ext19)); {
		case ok && corr != 0 && strings.HasSuffix(r.Name, "GraphLaunch"):
			name = r.Name
			if encl := graphEncloser(r); encl != "" {
				name += " in " + encl
			}
		case ok && corr != 0:
			if name = enclosing(r); name == "" {
				name = graphEncloser(r) // no operator: the Python frame or annotation
			}
		case x != 0 && x != corr:
			name = opByExt[x]
		case corr != 0 && corr < minCorr:
			before = append(before, early{e.Name, us})
		}
		if name != "" {
			f.ops[name] += us
			f.credited++
			if !ok || !strings.HasSuffix(r.Name, "GraphLaunch") { // a graph's kernels do not vote
				if votes[e.Name] == nil {
					votes[e.Name] = map[string]int{}
				}
				votes[e.Name][name]++
			}
		}
	}
	for _, b := range before {
		f.before++
		best, n := "", 0
		for op, c := range votes[b.kernel] {
			if c > n || (c == n && op < best) {
				best, n = op, c
			}
		}
		if best != "" {
			f.ops[best] += b.us
			f.credited++
			f.byName++
		}
	}
	var idle float64
	for _, ivs := range busy {
		if len(ivs) == 0 {
			idle++
			continue
		}
		slices.SortFunc(ivs, func(x, y iv) int { return cmp.Compare(x.lo, y.lo) })
		var sum, curLo, curHi int64
		curLo, curHi = ivs[0].lo, ivs[0].hi
		for _, v := range ivs[1:] {
			if v.lo > curHi {
				sum += curHi - curLo
				curLo, curHi = v.lo, v.hi
			} else {
				curHi = max(curHi, v.hi)
			}
		}
		sum += curHi - curLo
		idle += 1 - float64(sum)/float64(hi-lo)
	}
	if len(busy) > 0 {
		f.idle = idle / float64(len(busy))
	}
	return f
}

// refReplayFrame: the Python frames that only replay a graph or run
// PyTorch's machinery (built-ins, generated code, torch/, FX graph modules,
// vLLM's compilation wrappers, SGLang's graph runner).
func refReplayFrame(name string) bool {
	for _, p := range []string{"<", "nn.Module: GraphModule", "torch/", "vllm/compilation/", "triton/"} {
		if strings.HasPrefix(name, p) || strings.Contains(name, "-packages/"+p) {
			return true
		}
	}
	return strings.Contains(name, "cuda_graph_runner.py")
}
