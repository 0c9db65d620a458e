package torchtrace

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
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
	fam   Family
	us    float64
	count int
}

// analysis is the state of one file being read.
type analysis struct {
	opt      Options
	base     int64 // baseTimeNanoseconds (0 until seen: ts are then absolute)
	baseSeen bool
	inEvents bool // inside traceEvents: the time base is fixed from here on
	lo, hi   float64
	events   int64

	kernels map[string]*stat
	ops     map[string]*stat
	opNames []string
	opIndex map[string]int32
	opOf    *linkTable     // External id → operator
	pending map[int64]pend // External id → kernels seen before their operator
	famUS   map[Family]float64
	total   float64
	devices map[int]*intervalSet
	// winLo, winHi: Options.Window in trace microseconds (±Inf when unset).
	winLo, winHi float64
	parser       fastjson.Parser
}

func newAnalysis(opt Options) *analysis {
	if opt.Top <= 0 {
		opt.Top = 10
	}
	return &analysis{
		opt: opt, lo: math.Inf(1), hi: math.Inf(-1),
		kernels: map[string]*stat{}, ops: map[string]*stat{}, opIndex: map[string]int32{},
		opOf: newLinkTable(), pending: map[int64]pend{}, famUS: map[Family]float64{},
		devices: map[int]*intervalSet{}, winLo: math.Inf(-1), winHi: math.Inf(1),
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
		// Read (a Close from this goroutine raced a Read still under way
		// when the analysis stopped early, on a cancel: the race detector
		// caught it in TestCancel).
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

// setBase reads baseTimeNanoseconds. Kineto writes it before traceEvents;
// if another writer put it after, a window given in wall-clock time could
// not have been placed on the events already read.
func (a *analysis) setBase(v []byte) error {
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return fmt.Errorf("baseTimeNanoseconds %q: %w", v, err)
	}
	if a.inEvents && n != 0 && !a.opt.Window.Start.IsZero() {
		return errors.New("baseTimeNanoseconds comes after traceEvents: the window cannot be placed on the events; analyze without a window")
	}
	a.base, a.baseSeen = n, true
	return nil
}

// micros converts a wall-clock time to trace microseconds.
func (a *analysis) micros(t time.Time) float64 {
	return float64(t.UnixNano()-a.base) / 1e3
}

// events1 reads the traceEvents array, one event at a time.
func (a *analysis) events1(ctx context.Context, s *scanner) error {
	a.inEvents = true
	if w := a.opt.Window; w.Start.IsZero() && w.End.IsZero() && a.opt.Frame > 0 && a.base != 0 {
		a.winLo, a.winHi = 0, float64(a.opt.Frame.Nanoseconds())/1e3
	} else if !w.Start.IsZero() || !w.End.IsZero() {
		if !w.Start.IsZero() {
			a.winLo = a.micros(w.Start)
		}
		if !w.End.IsZero() {
			a.winHi = a.micros(w.End)
		}
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
	var ts, dur float64
	var pid int
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
			ts = number(v)
		case "dur":
			dur = number(v)
		case "pid":
			pid = int(number(v))
		case "args":
			args = v
		}
	})
	if len(ph) != 1 || ph[0] != 'X' {
		return
	}
	switch {
	case isCat(cat, catKernel), isCat(cat, catMemcpy), isCat(cat, catMemset):
		a.gpu(cat, name, pid, ts, dur, externalID(args))
	case isCat(cat, catCPUOp):
		a.cpuOp(name, externalID(args))
	}
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

func externalID(args *fastjson.Value) int64 {
	if args == nil {
		return 0
	}
	if v := args.Get("External id"); v != nil {
		return int64(number(v))
	}
	return 0
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

// gpu folds a kernel, memcpy or memset, clipped to the window.
func (a *analysis) gpu(cat, name []byte, dev int, ts, dur float64, ext int64) {
	lo, hi := max(ts, a.winLo), min(ts+max(dur, 0), a.winHi)
	if hi < lo || (hi == lo && dur > 0) {
		return
	}
	st := a.kernels[string(name)]
	if st == nil {
		key := string(name)
		fam := Classify(string(cat), key)
		if len(a.kernels) >= maxNames {
			key = otherKernels + " " + string(fam)
			st = a.kernels[key]
		}
		if st == nil {
			st = &stat{fam: fam}
			a.kernels[key] = st
		}
	}
	us := hi - lo
	st.us += us
	st.count++
	a.famUS[st.fam] += us
	a.total += us
	a.lo, a.hi = min(a.lo, lo), max(a.hi, hi)
	d := a.devices[dev]
	if d == nil {
		d = &intervalSet{}
		a.devices[dev] = d
	}
	if st.fam != FamilyMemory {
		d.add(lo, hi)
	}
	if ext == 0 {
		return
	}
	if op, ok := a.opOf.get(ext); ok {
		a.opStat(op).add(us)
	} else if p, ok := a.pending[ext]; ok || len(a.pending) < maxPending {
		a.pending[ext] = pend{p.us + us, p.count + 1}
	}
}

// pend is what kernels under one External id took before the operator
// carrying that id was read.
type pend struct {
	us    float64
	count int32
}

func (st *stat) add(us float64) {
	st.us += us
	st.count++
}

// cpuOp remembers which operator an External id names, and credits it the
// kernels already seen under that id.
func (a *analysis) cpuOp(name []byte, ext int64) {
	if ext == 0 {
		return
	}
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
	if p, ok := a.pending[ext]; ok {
		st := a.opStat(idx)
		st.us += p.us
		st.count += int(p.count)
		delete(a.pending, ext)
	}
	a.opOf.set(ext, idx)
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
