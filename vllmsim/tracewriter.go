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
// output_json.cpp lays it out: schemaVersion, deviceProperties, metadata,
// displayTimeUnit and baseTimeNanoseconds, then the traceEvents array (ts
// in µs relative to baseTimeNanoseconds, three decimals), then
// distributedInfo and traceName. Events are written as they are made, so a
// long frame never sits in memory whole.
type traceWriter struct {
	f     *os.File
	zw    *gzip.Writer
	w     *bufio.Writer
	base  time.Time
	b     []byte
	first bool
	table map[string]*tableRow // for profiler_out_<rank>.txt
	order []string
	err   error
}

// tableRow is one line of torch's key_averages table.
type tableRow struct {
	cpu, cuda float64 // µs
	calls     int
}

// createTrace opens path and writes the header; head is the JSON of the
// keys before traceEvents (without braces), e.g. `"schemaVersion": 1, …,`.
func createTrace(path string, base time.Time, head string) (*traceWriter, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("profile %s: %w", path, err)
	}
	zw, _ := gzip.NewWriterLevel(f, gzip.BestSpeed)
	tw := &traceWriter{f: f, zw: zw, w: bufio.NewWriterSize(zw, 256<<10), base: base, first: true,
		table: map[string]*tableRow{}}
	tw.raw("{\n  " + head + "\n  \"displayTimeUnit\": \"ms\",\n  \"baseTimeNanoseconds\": " +
		strconv.FormatInt(base.UnixNano(), 10) + ",\n  \"traceEvents\": [")
	return tw, nil
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

// x writes a complete event; dur in µs.
func (tw *traceWriter) x(cat, name string, pid, tid int, ts time.Time, dur float64, args ...kv) {
	b := tw.head("X", cat, name, pid, tid, ts)
	b = append(b, `, "dur": `...)
	b = strconv.AppendFloat(b, max(dur, 0), 'f', 3, 64)
	tw.end(b, args)
	tw.count(cat, name, dur)
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
	b = append(b, `, "ph": "M", "ts": 0.000, "pid": `...)
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
	b = strconv.AppendFloat(b, max(tw.rel(ts), 0), 'f', 3, 64)
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
// time, cpu_op and cuda_runtime to CPU time.
func (tw *traceWriter) count(cat, name string, dur float64) {
	var cuda bool
	switch cat {
	case "kernel", "gpu_memcpy", "gpu_memset":
		cuda = true
	case "cpu_op", "cuda_runtime":
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
