package vllmsim

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/klauspost/compress/gzip"
)

// traceWriter streams one Chrome-trace file the way Kineto's
// output_json.cpp lays it out since 08fcb941 (2025-03): schemaVersion,
// deviceProperties, metadata, displayTimeUnit and baseTimeNanoseconds, then
// the traceEvents array, then distributedInfo and traceName. The base is not
// the recording's start: Kineto's ChromeTraceBaseTime (output_json.h) is the
// clock floored to a 7,889,238 s (3-month) boundary, so ts (µs after it,
// three decimals) run to ~10^13 and the recording is placed only by the
// profiler's own span, "PyTorch Profiler (0)", written near the end as
// handleTraceSpan does. Events outside the recording are dropped, as
// Kineto's outOfRange drops GPU activity that starts before the capture
// window or ends after it (GenericActivityProfiler.cpp). Events are written
// as they are made, so a long frame never sits in memory whole.
type traceWriter struct {
	f      *os.File
	zw     *gzip.Writer
	w      *bufio.Writer
	base   time.Time
	lo, hi time.Time // the recording: events outside it are dropped
	b      []byte
	first  bool
	table  map[string]*tableRow // for profiler_out_<rank>.txt
	order  []string
	// written sums the GPU time of the kernels written, the truth the
	// profiler's status reports for tests (ProfilerStatus.LastCapture).
	written CaptureTruth
	err     error
}

// kinetoBaseGranularity is ChromeTraceBaseTime's floor: 7,889,238 s.
const kinetoBaseGranularity = 7889238 * time.Second

// kinetoBase is the baseTimeNanoseconds Kineto writes for a trace recorded
// from t: the clock floored to a 3-month boundary.
func kinetoBase(t time.Time) time.Time {
	g := int64(kinetoBaseGranularity)
	return time.Unix(0, t.UnixNano()/g*g)
}

// tableRow is one line of torch's key_averages table.
type tableRow struct {
	cpu, cuda float64 // µs
	calls     int
}

// createTrace opens path for a recording from begun to ended and writes
// the header; head is the JSON of the keys before traceEvents (without
// braces), e.g. `"schemaVersion": 1, …,`.
func createTrace(path string, begun, ended time.Time, head string) (*traceWriter, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("profile %s: %w", path, err)
	}
	zw, _ := gzip.NewWriterLevel(f, gzip.BestSpeed)
	base := kinetoBase(begun)
	tw := &traceWriter{f: f, zw: zw, w: bufio.NewWriterSize(zw, 256<<10), base: base, lo: begun, hi: ended, first: true,
		table: map[string]*tableRow{}}
	tw.raw("{\n  " + head + "\n  \"displayTimeUnit\": \"ms\",\n  \"baseTimeNanoseconds\": " +
		strconv.FormatInt(base.UnixNano(), 10) + ",\n  \"traceEvents\": [")
	return tw, nil
}

// within says whether an event from ts lasting dur µs lies inside the
// recording (Kineto's outOfRange, the other way round).
func (tw *traceWriter) within(ts time.Time, dur float64) bool {
	return !ts.Before(tw.lo) && !at(ts, max(dur, 0)).After(tw.hi)
}

// spans writes the profiler's own span over the recording and its
// iteration-start instant, as Kineto's handleTraceSpan does, and the
// "Record Window End" instant of finalizeTrace.
func (tw *traceWriter) spans() {
	b := tw.b[:0]
	b = append(b, "\n  {\n    \"ph\": \"X\", \"cat\": \"Trace\", \"ts\": "...)
	b = strconv.AppendFloat(b, tw.rel(tw.lo), 'f', 3, 64)
	b = append(b, `, "dur": `...)
	b = strconv.AppendFloat(b, float64(tw.hi.Sub(tw.lo).Nanoseconds())/1e3, 'f', 3, 64)
	b = append(b, ",\n    \"pid\": \"Spans\", \"tid\": \"PyTorch Profiler\",\n    \"name\": \"PyTorch Profiler (0)\""...)
	tw.end(b, []kv{ai("Op count", 0)})
	b = tw.b[:0]
	b = append(b, "\n  {\n    \"name\": \"Iteration Start: PyTorch Profiler\", \"ph\": \"i\", \"s\": \"g\",\n    \"pid\": \"Traces\", \"tid\": \"Trace PyTorch Profiler\", \"ts\": "...)
	b = strconv.AppendFloat(b, tw.rel(tw.lo), 'f', 3, 64)
	tw.end(b, nil)
	b = tw.b[:0]
	b = append(b, "\n  {\n    \"name\": \"Record Window End\", \"ph\": \"i\", \"s\": \"g\",\n    \"pid\": \"\", \"tid\": \"\", \"ts\": "...)
	b = strconv.AppendFloat(b, tw.rel(tw.hi), 'f', 3, 64)
	tw.end(b, nil)
}

func (tw *traceWriter) raw(s string) {
	if tw.err == nil {
		_, tw.err = tw.w.WriteString(s)
	}
}

// close ends the array, writes tail (the keys after it, e.g.
// distributedInfo, without the trailing comma) and traceName, and closes the
// file.
func (tw *traceWriter) close(tail, traceName string) error {
	tw.spans()
	tw.raw("\n  ],\n  ")
	if tail != "" {
		tw.raw(tail + ",\n  ")
	}
	tw.raw(`"traceName": ` + strconv.Quote(traceName) + "\n}\n")
	if tw.err == nil {
		tw.err = tw.w.Flush()
	}
	err := errors.Join(tw.err, tw.zw.Close(), tw.f.Close())
	if err != nil {
		return fmt.Errorf("profile %s: %w", tw.f.Name(), err)
	}
	return nil
}

// rel is t in trace microseconds.
func (tw *traceWriter) rel(t time.Time) float64 {
	return float64(t.Sub(tw.base).Nanoseconds()) / 1e3
}

// kv is one argument of an event: an integer, a float or a string.
type kv struct {
	k string
	i int64
	f float64
	s string
	t byte // 'i', 'f', 's'
}

func ai(k string, v int64) kv   { return kv{k: k, i: v, t: 'i'} }
func af(k string, v float64) kv { return kv{k: k, f: v, t: 'f'} }
func as(k, v string) kv         { return kv{k: k, s: v, t: 's'} }

// x writes a complete event, dur in µs, when it lies inside the recording;
// it says whether it did.
func (tw *traceWriter) x(cat, name string, pid, tid int, ts time.Time, dur float64, args ...kv) bool {
	if !tw.within(ts, dur) {
		return false
	}
	b := tw.head("X", cat, name, pid, tid, ts)
	b = append(b, `, "dur": `...)
	b = strconv.AppendFloat(b, max(dur, 0), 'f', 3, 64)
	tw.end(b, args)
	tw.count(cat, name, dur)
	return true
}

// flow writes an ac2g flow event ("s" on the launch, "f" on the kernel).
func (tw *traceWriter) flow(ph string, id int64, pid, tid int, ts time.Time) {
	b := tw.head(ph, "ac2g", "ac2g", pid, tid, ts)
	b = append(b, `, "id": `...)
	b = strconv.AppendInt(b, id, 10)
	if ph == "f" {
		b = append(b, `, "bp": "e"`...)
	}
	tw.end(b, nil)
}

// meta writes an "M" event (process_name, thread_name, labels, sort index).
func (tw *traceWriter) meta(name string, pid, tid int, args ...kv) {
	b := tw.b[:0]
	b = append(b, "\n  {\n    \"name\": "...)
	b = strconv.AppendQuote(b, name)
	b = append(b, `, "ph": "M", "ts": `...)
	b = strconv.AppendFloat(b, tw.rel(tw.lo), 'f', 3, 64)
	b = append(b, `, "pid": `...)
	b = strconv.AppendInt(b, int64(pid), 10)
	b = append(b, `, "tid": `...)
	b = strconv.AppendInt(b, int64(tid), 10)
	tw.end(b, args)
}

func (tw *traceWriter) head(ph, cat, name string, pid, tid int, ts time.Time) []byte {
	b := tw.b[:0]
	b = append(b, "\n  {\n    \"ph\": \""...)
	b = append(b, ph...)
	b = append(b, `", "cat": "`...)
	b = append(b, cat...)
	b = append(b, `", "name": `...)
	b = strconv.AppendQuote(b, name)
	b = append(b, `, "pid": `...)
	b = strconv.AppendInt(b, int64(pid), 10)
	b = append(b, `, "tid": `...)
	b = strconv.AppendInt(b, int64(tid), 10)
	b = append(b, ",\n    \"ts\": "...)
	b = strconv.AppendFloat(b, tw.rel(ts), 'f', 3, 64)
	return b
}

func (tw *traceWriter) end(b []byte, args []kv) {
	if len(args) > 0 {
		b = append(b, ",\n    \"args\": {"...)
		for i, a := range args {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, "\n      "...)
			b = strconv.AppendQuote(b, a.k)
			b = append(b, ": "...)
			switch a.t {
			case 'i':
				b = strconv.AppendInt(b, a.i, 10)
			case 'f':
				b = strconv.AppendFloat(b, a.f, 'f', 6, 64)
			default:
				b = strconv.AppendQuote(b, a.s)
			}
		}
		b = append(b, "\n    }"...)
	}
	b = append(b, "\n  }"...)
	if !tw.first {
		tw.raw(",")
	}
	tw.first = false
	if tw.err == nil {
		_, tw.err = tw.w.Write(b)
	}
	tw.b = b
}

// count adds an event to the key_averages table: GPU categories to CUDA
// time, cpu_op and the runtime and driver calls to CPU time.
func (tw *traceWriter) count(cat, name string, dur float64) {
	var cuda bool
	switch cat {
	case "kernel", "gpu_memcpy", "gpu_memset":
		cuda = true
	case "cpu_op", "cuda_runtime", "cuda_driver":
	default:
		return
	}
	r := tw.table[name]
	if r == nil {
		r = &tableRow{}
		tw.table[name] = r
		tw.order = append(tw.order, name)
	}
	r.calls++
	if cuda {
		r.cuda += dur
	} else {
		r.cpu += dur
	}
}
