package torchtrace

import (
	"bytes"
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/autocapture/autocapture/torchtrace/internal/gen"
)

func genTrace(t testing.TB, c gen.Config, gz bool) ([]byte, *gen.Truth) {
	t.Helper()
	var buf bytes.Buffer
	var truth *gen.Truth
	var err error
	if gz {
		zw := gzip.NewWriter(&buf)
		truth, err = gen.Write(zw, c)
		if cerr := zw.Close(); err == nil {
			err = cerr
		}
	} else {
		truth, err = gen.Write(&buf, c)
	}
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), truth
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*max(1, math.Abs(a), math.Abs(b)) }

// TestAnalyzeMatchesTruth reads generated traces in every layout a writer
// may use and checks the sums against what the generator put in.
func TestAnalyzeMatchesTruth(t *testing.T) {
	const base = int64(1_767_225_600_000_000_000)
	cases := []struct {
		name string
		cfg  gen.Config
		gz   bool
	}{
		{"plain", gen.Config{Seed: 1, Steps: 30, BaseNS: base}, false},
		{"gzip", gen.Config{Seed: 2, Steps: 30, BaseNS: base, Device: 3}, true},
		{"shuffled events", gen.Config{Seed: 3, Steps: 30, BaseNS: base, Shuffle: 5000}, true},
		{"metadata after traceEvents", gen.Config{Seed: 4, Steps: 30, BaseNS: base, MetadataLast: true}, true},
		{"tensor parallel, overlapping streams", gen.Config{Seed: 5, Steps: 30, BaseNS: base, TP: 2, Device: 1}, true},
		{"gemm regression", gen.Config{Seed: 6, Steps: 30, BaseNS: base, GEMMScale: 8}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			data, truth := genTrace(t, tc.cfg, tc.gz)
			r, err := Analyze(context.Background(), bytes.NewReader(data), Options{Top: 50})
			if err != nil {
				t.Fatal(err)
			}
			if r.Events != truth.Events {
				t.Errorf("events %d, want %d", r.Events, truth.Events)
			}
			if !near(r.KernelUS, truth.KernelUS) {
				t.Errorf("kernel µs %.3f, want %.3f", r.KernelUS, truth.KernelUS)
			}
			for fam, us := range truth.FamUS {
				if got := r.Families[Family(fam)]; !near(got, us/truth.KernelUS) {
					t.Errorf("family %s share %.4f, want %.4f", fam, got, us/truth.KernelUS)
				}
			}
			wantIdle := 1 - truth.BusyUS/(truth.EndUS-truth.StartUS)
			if math.Abs(r.IdleShare-wantIdle) > 1e-9 {
				t.Errorf("idle share %.6f, want %.6f", r.IdleShare, wantIdle)
			}
			if len(r.Ranks) != 1 || r.Ranks[0] != tc.cfg.Device {
				t.Errorf("ranks %v, want [%d]", r.Ranks, tc.cfg.Device)
			}
			wantStart := time.Unix(0, base+int64(math.Round(truth.StartUS*1e3)))
			if !r.Window.Start.Equal(wantStart) {
				t.Errorf("window start %v, want %v", r.Window.Start, wantStart)
			}
			ops := map[string]float64{}
			for _, e := range r.TopOps {
				ops[e.Name] = e.GPUus
			}
			for op, us := range truth.OpUS {
				if !near(ops[op], us) {
					t.Errorf("op %s: %.3f µs, want %.3f", op, ops[op], us)
				}
			}
			if _, ok := ops["aten::linear"]; ok {
				t.Errorf("outer op aten::linear credited: kernels belong to the innermost op")
			}
			if r.BytesRead == 0 || (!tc.gz && r.BytesRead != int64(len(data))) {
				t.Errorf("bytes read %d of %d", r.BytesRead, len(data))
			}
		})
	}
}

// TestWindowClips keeps only the GPU activity inside the frame, on a trace
// whose base comes from baseTimeNanoseconds.
func TestWindowClips(t *testing.T) {
	const doc = `{"baseTimeNanoseconds": 1000000000000, "traceEvents": [
	{"ph":"X","cat":"kernel","name":"ampere_bf16_s16816gemm","pid":0,"tid":7,"ts":100,"dur":100},
	{"ph":"X","cat":"kernel","name":"flash_fwd_kernel","pid":0,"tid":7,"ts":250,"dur":100},
	{"ph":"X","cat":"kernel","name":"flash_fwd_kernel","pid":0,"tid":8,"ts":280,"dur":40},
	{"ph":"X","cat":"gpu_memcpy","name":"Memcpy HtoD","pid":0,"tid":7,"ts":500,"dur":10},
	{"ph":"X","cat":"kernel","name":"late","pid":0,"tid":7,"ts":900,"dur":10}]}`
	at := func(us int64) time.Time { return time.Unix(0, 1000000000000+us*1000) }
	r, err := Analyze(context.Background(), strings.NewReader(doc), Options{Window: Window{Start: at(150), End: at(650)}})
	if err != nil {
		t.Fatal(err)
	}
	// Inside: gemm 150..200 (50), flash 250..350 (100) + 280..320 (40), memcpy 10.
	if !near(r.KernelUS, 200) {
		t.Errorf("kernel µs %.1f, want 200", r.KernelUS)
	}
	if !near(r.Families[FamilyAttention], 140.0/200) || !near(r.Families[FamilyGEMM], 50.0/200) {
		t.Errorf("families %v", r.Families)
	}
	// Busy (kernels, not copies): 50 + 100 over a 500 µs window.
	if want := 1 - 150.0/500; !near(r.IdleShare, want) {
		t.Errorf("idle %.4f, want %.4f", r.IdleShare, want)
	}
	if !r.Window.Start.Equal(at(150)) || !r.Window.End.Equal(at(510)) {
		t.Errorf("window %v..%v, want the clipped activity 150..510", r.Window.Start, r.Window.End)
	}
	for _, e := range r.TopKernels {
		if e.Name == "late" {
			t.Errorf("a kernel after the window is counted: %+v", e)
		}
	}
}

// TestFrameFromTheTraceItself: the frame is the profiler's own span (else
// the GPU activity's extent), clipped by Options.Frame from its start;
// baseTimeNanoseconds (Kineto floors it to a 3-month boundary, weeks before
// the events) places nothing.
func TestFrameFromTheTraceItself(t *testing.T) {
	// The base is 40 days before the events, as Kineto writes it.
	const events = `
	{"ph":"X","cat":"kernel","name":"ampere_bf16_s16816gemm","pid":0,"tid":7,"ts":3456000000100,"dur":100},
	{"ph":"X","cat":"kernel","name":"flash_fwd_kernel","pid":0,"tid":7,"ts":3456000000250,"dur":100},
	{"ph":"X","cat":"kernel","name":"late","pid":0,"tid":7,"ts":3456000000900,"dur":10}`
	const span = `,
	{"ph":"X","cat":"Trace","name":"PyTorch Profiler (0)","pid":"Spans","tid":"PyTorch Profiler","ts":3456000000050,"dur":950}`
	const base = `"baseTimeNanoseconds": 1735632360000000000`
	docs := map[string]string{
		"span, base first":   `{` + base + `, "traceEvents": [` + events + span + `]}`,
		"span, base last":    `{"traceEvents": [` + events + span + `], ` + base + `}`,
		"no span, base last": `{"traceEvents": [` + events + `], ` + base + `}`,
	}
	for name, doc := range docs {
		t.Run(name, func(t *testing.T) {
			hasSpan := strings.Contains(doc, "Trace")
			r, err := Analyze(context.Background(), strings.NewReader(doc), Options{Frame: 300 * time.Microsecond})
			if err != nil {
				t.Fatal(err)
			}
			// Span: 50..350 holds gemm 100..200 and flash 250..350. No span:
			// the activity's extent 100..910, clipped to 100..400: the same.
			if !near(r.KernelUS, 200) || !near(r.Families[FamilyGEMM], 0.5) {
				t.Errorf("kernel µs %.1f, families %v; want 200, gemm 1/2", r.KernelUS, r.Families)
			}
			if want := 1 - 200.0/300; !near(r.IdleShare, want) {
				t.Errorf("idle %.4f, want %.4f over the 300 µs frame", r.IdleShare, want)
			}
			if !r.Frame.Clipped || r.Frame.Outside != 1 || r.Frame.Inexact {
				t.Errorf("frame %+v: clipped, 1 event outside, exact", r.Frame)
			}
			wantSrc, wantStart := FrameGPU, int64(3456000000100)
			if hasSpan {
				wantSrc, wantStart = FrameSpan, 3456000000050
			}
			if at := time.Unix(0, 1735632360000000000+wantStart*1000).UTC(); r.Frame.Source != wantSrc || !r.Frame.Start.Equal(at) || !r.Frame.End.Equal(at.Add(300*time.Microsecond)) {
				t.Errorf("frame %+v, want %s from %v for 300 µs", r.Frame, wantSrc, at)
			}
			// Unclipped (the frame the daemon measured is longer): the span.
			r, err = Analyze(context.Background(), strings.NewReader(doc), Options{Frame: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if !near(r.KernelUS, 210) || r.Frame.Clipped {
				t.Errorf("kernel µs %.1f, frame %+v; want all 210 µs", r.KernelUS, r.Frame)
			}
			frame := 810.0
			if hasSpan {
				frame = 950
			}
			if want := 1 - 210/frame; !near(r.IdleShare, want) {
				t.Errorf("idle %.4f, want %.4f over the %.0f µs frame", r.IdleShare, want, frame)
			}
		})
	}
}

// TestLinksEitherOrder: kernels credit their operator whether the cpu_op
// comes before or after them in the file.
func TestLinksEitherOrder(t *testing.T) {
	const doc = `{"traceEvents": [
	{"ph":"X","cat":"kernel","name":"gemm_a","pid":0,"tid":7,"ts":10,"dur":30,"args":{"External id":7,"correlation":70}},
	{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":9,"tid":9,"ts":1,"dur":5,"args":{"External id":7}},
	{"ph":"X","cat":"kernel","name":"gemm_a","pid":0,"tid":7,"ts":50,"dur":10,"args":{"External id":7}},
	{"ph":"X","cat":"cpu_op","name":"aten::addmm","pid":9,"tid":9,"ts":2,"dur":5,"args":{"External id":8}},
	{"ph":"X","cat":"kernel","name":"gemm_b","pid":0,"tid":7,"ts":70,"dur":5,"args":{"External id":8}},
	{"ph":"X","cat":"kernel","name":"orphan","pid":0,"tid":7,"ts":80,"dur":5,"args":{"External id":99}}
	], "traceName": "x"}`
	r, err := Analyze(context.Background(), strings.NewReader(doc), Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Entry{}
	for _, e := range r.TopOps {
		got[e.Name] = e
	}
	if e := got["aten::mm"]; e.GPUus != 40 || e.Count != 2 {
		t.Errorf("aten::mm %+v, want 40 µs over 2 kernels", e)
	}
	if e := got["aten::addmm"]; e.GPUus != 5 {
		t.Errorf("aten::addmm %+v, want 5 µs", e)
	}
	if len(got) != 2 {
		t.Errorf("ops %v: the orphan kernel has no operator", r.TopOps)
	}
	if r.TopOps[0].Name != "aten::mm" || !near(r.TopOps[0].Share, 40.0/50) {
		t.Errorf("top op %+v", r.TopOps[0])
	}
}

// TestTrickyJSON: strings holding brackets and escaped quotes, a bare
// array of events, numbers as strings.
func TestTrickyJSON(t *testing.T) {
	docs := map[string]string{
		"escapes": `{"traceName":"a\"]}[{","traceEvents":[{"ph":"X","cat":"kernel","name":"k \"}]\\","pid":"0","tid":7,"ts":1,"dur":2}],"x":{"y":["]"]}}`,
		"array":   `[{"ph":"X","cat":"Kernel","name":"k \"}]\\","pid":0,"tid":7,"ts":1,"dur":2}]`,
	}
	for name, doc := range docs {
		r, err := Analyze(context.Background(), strings.NewReader(doc), Options{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if r.KernelUS != 2 || len(r.TopKernels) != 1 || r.TopKernels[0].Name != `k "}]\` {
			t.Errorf("%s: %+v", name, r.TopKernels)
		}
	}
}

func TestErrors(t *testing.T) {
	data, _ := genTrace(t, gen.Config{Seed: 1, Steps: 40}, true)
	plain, _ := genTrace(t, gen.Config{Seed: 1, Steps: 40}, false)
	gz := func(s string) []byte {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		zw.Write([]byte(s))
		zw.Close()
		return b.Bytes()
	}
	cases := []struct {
		name     string
		in       []byte
		notTrace bool
		want     string
	}{
		{"truncated gzip", data[:len(data)/2], false, "truncated trace: the input ended after"},
		{"truncated JSON", plain[:len(plain)/2], false, "truncated trace: the input ended after"},
		{"JSON cut inside the last key", plain[:len(plain)-3], false, "truncated"},
		{"empty", nil, true, "empty input"},
		{"text", []byte("hello world"), true, "not a JSON object"},
		{"gzipped text", gz("hello"), true, "not a JSON object"},
		{"object without events", []byte(`{"schemaVersion": 1, "traceName": "x"}`), true, "no traceEvents"},
		{"events not an array", []byte(`{"traceEvents": 3}`), true, "not an array"},
		{"bad event", []byte(`{"traceEvents": [{"ph": "X", "dur": }]}`), false, "event 0 at byte"},
		{"bad separator", []byte(`{"traceEvents": [{"ph": "X"} {"ph": "X"}]}`), false, "want ','"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Analyze(context.Background(), bytes.NewReader(tc.in), Options{})
			if err == nil {
				t.Fatal("no error")
			}
			if errors.Is(err, ErrNotTrace) != tc.notTrace {
				t.Errorf("ErrNotTrace %v, want %v: %v", errors.Is(err, ErrNotTrace), tc.notTrace, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q lacks %q", err, tc.want)
			}
		})
	}
}

func TestCancel(t *testing.T) {
	data, _ := genTrace(t, gen.Config{Seed: 1, Steps: 200}, true)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Analyze(ctx, bytes.NewReader(data), Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled analysis: %v", err)
	}
}

// TestBaseAfterEventsWithWindow: a wall-clock window is placed through
// baseTimeNanoseconds wherever the key sits (Kineto wrote it after
// traceEvents from 2024-05 to 2025-03) and reads the same either way.
func TestBaseAfterEventsWithWindow(t *testing.T) {
	const base = int64(1735632360000000000)
	first, _ := genTrace(t, gen.Config{Seed: 1, Steps: 30, BaseNS: base}, false)
	last, truth := genTrace(t, gen.Config{Seed: 1, Steps: 30, BaseNS: base, MetadataLast: true}, false)
	at := func(us float64) time.Time { return time.Unix(0, base+int64(us*1e3)) }
	mid := (truth.StartUS + truth.EndUS) / 2
	w := Window{Start: at(truth.StartUS + (mid-truth.StartUS)/2), End: at(mid + (truth.EndUS-mid)/2)}
	a, err := Analyze(context.Background(), bytes.NewReader(first), Options{Window: w, Top: 50})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Analyze(context.Background(), bytes.NewReader(last), Options{Window: w, Top: 50})
	if err != nil {
		t.Fatal(err)
	}
	if a.KernelUS <= 0 || a.KernelUS >= truth.KernelUS*0.75 {
		t.Fatalf("kernel µs %.1f of %.1f: the window should keep about half", a.KernelUS, truth.KernelUS)
	}
	if !near(a.KernelUS, b.KernelUS) || !near(a.IdleShare, b.IdleShare) || !a.Window.Start.Equal(b.Window.Start) || !a.Window.End.Equal(b.Window.End) {
		t.Errorf("base after the events: %.3f µs idle %.5f window %v; base first: %.3f µs idle %.5f window %v",
			b.KernelUS, b.IdleShare, b.Window, a.KernelUS, a.IdleShare, a.Window)
	}
	if b.Frame.Inexact || b.Frame.Outside == 0 || a.Frame.Source != FrameWindow {
		t.Errorf("frames %+v / %+v", a.Frame, b.Frame)
	}
	for i := range a.TopOps {
		if a.TopOps[i].Name != b.TopOps[i].Name || !near(a.TopOps[i].GPUus, b.TopOps[i].GPUus) {
			t.Errorf("op %d: %+v vs %+v", i, b.TopOps[i], a.TopOps[i])
		}
	}
}
