package torchtrace

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/valyala/fastjson"
)

// Bounds on what one analysis keeps, whatever the file's size.
const (
	// maxNames bounds the distinct kernel and operator names kept; names
	// past it are summed under otherKernels / otherOps.
	maxNames = 1<<16 - 2
	// maxPending bounds the External ids of kernels read before their
	// operator (~40 bytes each, 5 MiB): a file in Kineto's order lists
	// operators first and needs none. Past it such kernels are not linked.
	// The operators themselves: see linkTable.
	maxPending = 1 << 17
)

// Names kernels and operators are summed under past maxNames.
const (
	otherKernels = "(other kernels)"
	otherOps     = "(other operators)"
)

// stat is one name's sums.
type stat struct {
	name  string // as shown (demangled); the map key when empty
	fam   Family
	us    float64
	count int
	busy  bool // counts toward the device's busy time (not a copy)
	// votes: how many of this kernel's instances each operator was
	// credited with, for kernels launched before the frame (graphs.go).
	votes []opVotes
}

// analysis is the state of one file being read.
type analysis struct {
	opt      Options
	base     int64 // baseTimeNanoseconds (0 until seen: ts are then absolute)
	baseSeen bool
	inEvents bool // inside traceEvents
	// origin is the integer part of the first complete event's ts: times are
	// kept as µs after it, so an absolute µs timestamp with a fractional part
	// (ns resolution) keeps its nanoseconds in a float64.
	origin    int64
	originSet bool
	// eager: Options.Window was placed on the events as they came (the base
	// was known before traceEvents), so GPU activity is clipped as it is
	// read; otherwise the frame is decided at the end (see frame.go).
	eager        bool
	winLo, winHi float64 // the eager window in trace µs (±Inf when unset)
	lo, hi       float64 // extent of the GPU activity read
	events       int64
	gpuSeq       int64

	kernels map[string]*stat
	ops     map[string]*stat
	opNames []string
	opIndex map[string]int32
	famUS   map[Family]float64
	total   float64
	devices map[int]*device
	spans   spans
	edges   *edges // the GPU events nearest the frame's ends (nil when eager)
	attr    *attributor
	parser  fastjson.Parser
	num     []byte
}

// device is one GPU's busy time and how many of its events were kept.
type device struct {
	set intervalSet
	n   int
}

func newAnalysis(opt Options) *analysis {
	if opt.Top <= 0 {
		opt.Top = 10
	}
	return &analysis{
		opt: opt, lo: math.Inf(1), hi: math.Inf(-1),
		kernels: map[string]*stat{}, ops: map[string]*stat{}, opIndex: map[string]int32{},
		famUS: map[Family]float64{}, devices: map[int]*device{},
		winLo: math.Inf(-1), winHi: math.Inf(1), spans: newSpans(), attr: newAttributor(),
	}
}

// Analyze reads one trace file (gzip detected by its magic bytes) as a
// stream: memory stays bounded whatever the file's size (see maxElement,
// maxNames, maxPending, linkTable, maxIntervals).
func Analyze(ctx context.Context, r io.Reader, opt Options) (*Report, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	magic, _ := br.Peek(2)
	var src io.Reader = br
	gz := len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b
	if gz {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("torchtrace: gzip: %w", err)
		}
		// No Close here: the read-ahead goroutine closes zr after its last
		// Read: a Close from this goroutine would race a Read still under
		// way when the analysis stops early, on a cancel.
		ra := newReadahead(ctx, zr)
		defer ra.Close()
		src = ra
	}
	a := newAnalysis(opt)
	s := newScanner(src)
	err := a.document(ctx, s)
	if err != nil {
		if errors.Is(err, ErrNotTrace) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return nil, err
		}
		what := "JSON"
		if gz {
			what = "uncompressed JSON"
		}
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("torchtrace: truncated trace: the input ended after %d bytes of %s (%d events read): %w",
				s.offset(), what, a.events, io.ErrUnexpectedEOF)
		}
		return nil, fmt.Errorf("torchtrace: after %d bytes of %s (%d events read): %w", s.offset(), what, a.events, err)
	}
	rep := a.report()
	rep.BytesRead = s.offset()
	return rep, nil
}

// document reads the top level: an object whose keys come in any order, one
// of them traceEvents, or (Chrome's array form) a bare array of events.
func (a *analysis) document(ctx context.Context, s *scanner) error {
	c, err := s.peek()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%w: empty input", ErrNotTrace)
		}
		return err
	}
	switch c {
	case '[':
		return a.events1(ctx, s)
	case '{':
	default:
		return fmt.Errorf("%w: starts with %q, not a JSON object", ErrNotTrace, c)
	}
	s.pos++
	found := false
	for first := true; ; first = false {
		c, err := s.peek()
		if err != nil {
			return err
		}
		if c == '}' {
			s.pos++
			break
		}
		if !first {
			if err := s.expect(','); err != nil {
				return err
			}
		}
		key, err := s.str()
		if err != nil {
			return err
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		switch key {
		case "traceEvents":
			if c, err := s.peek(); err == nil && c != '[' {
				return fmt.Errorf("%w: traceEvents is not an array", ErrNotTrace)
			}
			found = true
			if err := a.events1(ctx, s); err != nil {
				return err
			}
		case "baseTimeNanoseconds":
			v, err := s.value(true)
			if err != nil {
				return err
			}
			if err := a.setBase(v); err != nil {
				return err
			}
		default:
			if _, err := s.value(false); err != nil {
				return err
			}
		}
	}
	if !found {
		return fmt.Errorf("%w: no traceEvents array", ErrNotTrace)
	}
	return nil
}

// setBase reads baseTimeNanoseconds. Kineto writes it before traceEvents
// since 08fcb941 (2025-03), after it from 84d95b82 (2024-05) to then, and
// not at all before: either way the frame is placed at the end (frame.go).
func (a *analysis) setBase(v []byte) error {
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return fmt.Errorf("baseTimeNanoseconds %q: %w", v, err)
	}
	if !a.baseSeen {
		a.base, a.baseSeen = n, true
	}
	return nil
}

// events1 reads the traceEvents array, one event at a time.
func (a *analysis) events1(ctx context.Context, s *scanner) error {
	a.inEvents = true
	// A window is placed on the events as they come only when the base is
	// already known; else (the base after traceEvents, or none) at the end.
	w := a.opt.Window
	if !w.Start.IsZero() || !w.End.IsZero() {
		a.eager = a.baseSeen
	}
	if !a.eager {
		a.edges = newEdges(maxEdge)
	}
	if err := s.expect('['); err != nil {
		return err
	}
	for first := true; ; first = false {
		c, err := s.peek()
		if err != nil {
			return err
		}
		if c == ']' {
			s.pos++
			return nil
		}
		if !first {
			if err := s.expect(','); err != nil {
				return err
			}
		}
		at := s.offset()
		b, err := s.value(true)
		if err != nil {
			return err
		}
		v, err := a.parser.ParseBytes(b)
		if err != nil {
			return fmt.Errorf("event %d at byte %d: %w", a.events, at, err)
		}
		a.events++
		a.event(v)
		if a.events&0xfff == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
	}
}

// event folds one trace event into the sums.
func (a *analysis) event(v *fastjson.Value) {
	o, err := v.Object()
	if err != nil {
		return
	}
	var ph, cat, name []byte
	var tsv *fastjson.Value
	var dur float64
	var pid, tid int64
	var args *fastjson.Value
	o.Visit(func(k []byte, v *fastjson.Value) {
		switch string(k) {
		case "ph":
			ph, _ = v.StringBytes()
		case "cat":
			cat, _ = v.StringBytes()
		case "name":
			name, _ = v.StringBytes()
		case "ts":
			tsv = v
		case "dur":
			dur = number(v)
		case "pid":
			pid = int64(number(v))
		case "tid":
			tid = int64(number(v))
		case "args":
			args = v
		}
	})
	if len(ph) != 1 || ph[0] != 'X' || tsv == nil {
		return
	}
	ts := a.ts(tsv)
	if math.IsNaN(ts) || math.IsInf(ts, 0) || math.IsNaN(dur) || math.IsInf(dur, 0) {
		return
	}
	dur = max(dur, 0)
	switch {
	case isCat(cat, catKernel), isCopyCat(cat):
		ext, corr := links(args)
		a.gpu(cat, name, int(pid), ts, dur, ext, corr)
	case isCat(cat, catCPUOp), isCat(cat, catOp19):
		ext, _ := links(args)
		a.cpuOp(name, pid, tid, ts, dur, ext)
	case isCat(cat, catRuntime), isCat(cat, catDriver), isCat(cat, catRT19):
		ext, corr := links(args)
		a.attr.launch(name, pid, tid, ts, ext, corr)
	case isCat(cat, catAnnotation), isCat(cat, catPython):
		a.attr.frame(name, pid, tid, ts, dur)
	case isCat(cat, catTrace):
		a.spans.add(name, ts, dur)
	}
}

// ts reads a timestamp as µs after the trace's origin. Integer and
// fixed-point numbers are split at the point, so the origin is subtracted
// exactly (1712195495505583.534 keeps its .534 µs); other spellings go
// through float64.
func (a *analysis) ts(v *fastjson.Value) float64 {
	var raw []byte
	switch v.Type() {
	case fastjson.TypeNumber:
		a.num = v.MarshalTo(a.num[:0])
		raw = a.num
	case fastjson.TypeString:
		raw, _ = v.StringBytes()
	default:
		return math.NaN()
	}
	ip, frac, ok := fixedPoint(raw)
	if !ok {
		f, err := strconv.ParseFloat(string(raw), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) > 1<<62 {
			return math.NaN()
		}
		ip, frac = int64(f), f-math.Trunc(f)
	}
	if !a.originSet {
		a.origin, a.originSet = ip, true
		a.placeWindow()
	}
	return float64(ip-a.origin) + frac
}

// fixedPoint splits "-?digits(.digits)?" into its integer part and fraction
// (with the sign of the number); false for anything else (exponents, more
// than 18 integer digits).
func fixedPoint(b []byte) (ip int64, frac float64, ok bool) {
	i, neg := 0, false
	if len(b) > 0 && b[0] == '-' {
		neg, i = true, 1
	}
	start := i
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		if i-start >= 18 {
			return 0, 0, false
		}
		ip = ip*10 + int64(b[i]-'0')
	}
	if i == start {
		return 0, 0, false
	}
	if i < len(b) {
		if b[i] != '.' {
			return 0, 0, false
		}
		scale := 0.1
		for i++; i < len(b); i++ {
			if b[i] < '0' || b[i] > '9' {
				return 0, 0, false
			}
			frac += float64(b[i]-'0') * scale
			scale /= 10
		}
	}
	if neg {
		ip, frac = -ip, -frac
	}
	return ip, frac, true
}

// placeWindow converts an eager Options.Window to trace µs, once the origin
// is known.
func (a *analysis) placeWindow() {
	if !a.eager {
		return
	}
	a.winLo, a.winHi = a.windowMicros()
}

// windowMicros is Options.Window in trace µs (±Inf for an open end), with
// the base as it is now.
func (a *analysis) windowMicros() (lo, hi float64) {
	lo, hi = math.Inf(-1), math.Inf(1)
	if w := a.opt.Window; !w.Start.IsZero() {
		lo = a.micros(w.Start)
	}
	if w := a.opt.Window; !w.End.IsZero() {
		hi = a.micros(w.End)
	}
	return lo, hi
}

// micros converts a wall-clock time to trace µs.
func (a *analysis) micros(t time.Time) float64 {
	return float64(t.UnixNano()-a.base-a.origin*1000) / 1e3
}

// number reads a JSON number, or a number written as a string (Kineto
// writes pid/tid as strings for some rows).
func number(v *fastjson.Value) float64 {
	switch v.Type() {
	case fastjson.TypeNumber:
		f, _ := v.Float64()
		return f
	case fastjson.TypeString:
		b, _ := v.StringBytes()
		f, _ := strconv.ParseFloat(string(b), 64)
		return f
	}
	return 0
}

// links reads an event's "External id" (PyTorch 1.9 wrote "external id")
// and its "correlation".
func links(args *fastjson.Value) (ext, corr int64) {
	if args == nil {
		return 0, 0
	}
	if v := args.Get("External id"); v != nil {
		ext = int64(number(v))
	} else if v := args.Get("external id"); v != nil {
		ext = int64(number(v))
	}
	if v := args.Get("correlation"); v != nil {
		corr = int64(number(v))
	}
	return ext, corr
}

func isCat(cat []byte, want string) bool {
	if len(cat) != len(want) {
		return false
	}
	for i, c := range cat {
		if c|0x20 != want[i] && c != want[i] {
			return false
		}
	}
	return true
}

// gpu folds a kernel, memcpy or memset. With an eager window it is clipped
// as it comes; otherwise it is kept whole and the frame's ends are cut at
// the end (frame.go).
func (a *analysis) gpu(cat, name []byte, dev int, ts, dur float64, ext, corr int64) {
	lo, hi := ts, ts+dur
	if a.eager {
		lo, hi = max(ts, a.winLo), min(ts+dur, a.winHi)
		if hi < lo || (hi == lo && dur > 0) {
			return
		}
	}
	st := a.kernelStat(cat, name)
	us := hi - lo
	st.us += us
	st.count++
	a.famUS[st.fam] += us
	a.total += us
	a.lo, a.hi = min(a.lo, lo), max(a.hi, hi)
	d := a.devices[dev]
	if d == nil {
		d = &device{}
		a.devices[dev] = d
	}
	d.n++
	if st.busy {
		d.set.add(lo, hi)
	}
	ref := a.attr.credit(a, st, us, ext, corr)
	if a.edges != nil {
		a.edges.add(gpuRec{ts: ts, end: ts + dur, st: st, ref: ref, seq: a.gpuSeq, dev: int32(dev)})
	}
	a.gpuSeq++
}

// kernelStat is the sums of the kernel called name, made on first sight.
func (a *analysis) kernelStat(cat, name []byte) *stat {
	if st := a.kernels[string(name)]; st != nil {
		return st
	}
	key := string(name)
	shown := KernelName(key)
	fam := classify(string(cat), shown)
	if len(a.kernels) >= maxNames {
		shown = ""
		key = otherKernels + " " + string(fam)
		if st := a.kernels[key]; st != nil {
			return st
		}
	}
	lower := strings.ToLower(key)
	// Copies keep the copy engines busy, not the SMs: the copy categories
	// and CUPTI's copy names filed as kernels. ROCm's blit kernels
	// (__amd_rocclr_copyBuffer) run on the compute units: busy.
	busy := !isCopyCat(cat) && !strings.HasPrefix(lower, "memcpy") && !strings.HasPrefix(lower, "memset")
	st := &stat{fam: fam, busy: busy}
	if shown != key {
		st.name = shown
	}
	a.kernels[key] = st
	return st
}

func (st *stat) add(us float64) {
	st.us += us
	st.count++
}

// cpuOp interns an operator's name, links its External id to it (crediting
// the kernels already seen under that id) and keeps its interval for the
// launches whose External id is no operator's (attribute.go).
func (a *analysis) cpuOp(name []byte, pid, tid int64, ts, dur float64, ext int64) {
	a.attr.operator(a, a.internOp(name), pid, tid, ts, dur, ext)
}

// internOp is the index of the operator called name, made on first sight
// (past maxNames, otherOps').
func (a *analysis) internOp(name []byte) int32 {
	idx, ok := a.opIndex[string(name)]
	if !ok {
		if len(a.opNames) >= maxNames {
			idx, ok = a.opIndex[otherOps]
		}
		if !ok {
			key := string(name)
			if len(a.opNames) >= maxNames {
				key = otherOps
			}
			idx = int32(len(a.opNames))
			a.opNames = append(a.opNames, key)
			a.opIndex[key] = idx
		}
	}
	return idx
}

func (a *analysis) opStat(idx int32) *stat {
	name := a.opNames[idx]
	st := a.ops[name]
	if st == nil {
		st = &stat{}
		a.ops[name] = st
	}
	return st
}
