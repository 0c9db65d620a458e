package torchtrace

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"testing"

	"github.com/klauspost/compress/gzip"
)

// Rewriting a real trace into the other layouts Kineto has written since
// 2021, keeping every event and argument, so that the same data is read in
// each (libkineto output_json.cpp over its history):
//   - kineto-2025: baseTimeNanoseconds (the clock floored to a 7,889,238 s
//     boundary, ChromeTraceBaseTime in output_json.h) before traceEvents, ts
//     in µs relative to it with three decimals (08fcb941, 2025-03-06, on);
//   - kineto-2024: the same with the key after traceEvents (84d95b82,
//     2024-05-10, to 08fcb941);
//   - absolute-ns: no base, absolute µs with three decimals (the ns
//     resolution traces of 2024);
//   - absolute-us: no base, integer µs and durations (PyTorch 1.9 to 2.3).
var layouts = []string{"kineto-2025", "kineto-2024", "absolute-ns", "absolute-us"}

// trimester is Kineto's base-time granularity, in ns.
const trimester = int64(7889238) * 1e9

// rewrite returns data (a trace, gzipped or not) in layout, uncompressed.
func rewrite(t testing.TB, data []byte, layout string) []byte {
	t.Helper()
	var r io.Reader = bytes.NewReader(data)
	if data[0] == 0x1f {
		zr, err := gzip.NewReader(r)
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	}
	dec := json.NewDecoder(r)
	dec.UseNumber()
	var top map[string]json.RawMessage
	if err := dec.Decode(&top); err != nil {
		t.Fatal(err)
	}
	var events []map[string]json.RawMessage
	if err := json.Unmarshal(top["traceEvents"], &events); err != nil {
		t.Fatal(err)
	}
	base := int64(0)
	if b, ok := top["baseTimeNanoseconds"]; ok {
		base, _ = strconv.ParseInt(string(b), 10, 64)
	}
	abs := func(raw json.RawMessage) int64 { return base + ns(json.Number(raw)) }
	// The new base: the frame's start floored to a trimester, as Kineto's
	// clock at start-up would give.
	newBase := int64(0)
	for _, e := range events {
		if string(e["cat"]) == `"Trace"` && e["ts"] != nil {
			newBase = abs(e["ts"]) / trimester * trimester
			break
		}
	}
	us3 := func(n int64) string { return fmt.Sprintf("%d.%03d", n/1000, n%1000) }
	for _, e := range events {
		ts, ok := e["ts"]
		if !ok {
			continue
		}
		a := abs(ts)
		switch layout {
		case "kineto-2025", "kineto-2024":
			e["ts"] = json.RawMessage(us3(a - newBase))
		case "absolute-ns":
			e["ts"] = json.RawMessage(us3(a))
		case "absolute-us":
			e["ts"] = json.RawMessage(strconv.FormatInt(int64(math.Round(float64(a)/1e3)), 10))
			if d, ok := e["dur"]; ok {
				e["dur"] = json.RawMessage(strconv.FormatInt(int64(math.Round(float64(ns(json.Number(d)))/1e3)), 10))
			}
		}
	}
	delete(top, "traceEvents")
	delete(top, "baseTimeNanoseconds")
	var out bytes.Buffer
	out.WriteString("{")
	field := func(k string, v []byte) {
		if out.Len() > 1 {
			out.WriteString(",\n")
		}
		kb, _ := json.Marshal(k)
		out.Write(kb)
		out.WriteString(": ")
		out.Write(v)
	}
	for k, v := range top {
		if k != "traceName" {
			field(k, v)
		}
	}
	if layout == "kineto-2025" {
		field("baseTimeNanoseconds", []byte(strconv.FormatInt(newBase, 10)))
	}
	evs, err := json.Marshal(events)
	if err != nil {
		t.Fatal(err)
	}
	field("traceEvents", evs)
	if layout == "kineto-2024" {
		field("baseTimeNanoseconds", []byte(strconv.FormatInt(newBase, 10)))
	}
	if v, ok := top["traceName"]; ok {
		field("traceName", v)
	}
	out.WriteString("}")
	return out.Bytes()
}
