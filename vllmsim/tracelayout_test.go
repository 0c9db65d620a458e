package vllmsim

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/autocapture/autocapture/torchtrace"
)

// TestTraceInTheCurrentKinetoLayout holds the simulator's rank traces to what
// Kineto writes today, so that our own closed loop cannot hide a reader that
// places the frame from baseTimeNanoseconds again: the base is the clock
// floored to a 7,889,238 s boundary (ChromeTraceBaseTime), the key comes
// before traceEvents (08fcb941), the recording is the "PyTorch Profiler (0)"
// span, and no event lies outside it (outOfRange), so the iteration running
// at the start is cut, not clamped onto the first kernels. torchtrace reads
// the files over the frame a capture measures and finds exactly the GPU and
// GEMM time the simulator wrote.
func TestTraceInTheCurrentKinetoLayout(t *testing.T) {
	o := Options{TensorParallel: 2, ProfilerLayers: 4, Seed: 7, Scenario: ScenarioUnexplained,
		ProfilerDir: t.TempDir(), ProfilerFlushDelay: time.Millisecond}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	// 15.0173 s: mid-iteration, so the recording starts inside one.
	s.Advance(15*time.Second + 17300*time.Microsecond)
	begun := s.Now()
	post(t, h, "/start_profile")
	s.Advance(2*time.Second + 3100*time.Microsecond)
	ended := s.Now()
	post(t, h, "/stop_profile")
	truth := s.Profiler().LastCapture
	if truth.Kernels == 0 || truth.GEMMus <= 0 || truth.Graphed == 0 || truth.PreFrame == 0 {
		t.Fatalf("the simulator wrote no kernels, none from a graph or none from before the recording: %+v", truth)
	}
	// Both ranks run the same steps: each holds half of every count.
	rankTruth := CaptureTruth{Graphed: truth.Graphed / 2, PreFrame: truth.PreFrame / 2}
	files, _ := filepath.Glob(filepath.Join(o.ProfilerDir, "dp0_*.pt.trace.json.gz"))
	if len(files) != 2 {
		t.Fatalf("rank traces %v", files)
	}
	var reports []*torchtrace.Report
	for _, path := range files {
		raw := gunzip(t, path)
		checkKinetoLayout(t, filepath.Base(path), raw, begun, ended)
		// The frame a capture measures runs from start_profile sent to
		// stop_profile answered: a little longer than the recording.
		r, err := torchtrace.Analyze(context.Background(), bytes.NewReader(raw), torchtrace.Options{Frame: ended.Sub(begun) + 40*time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if r.Frame.Source != torchtrace.FrameSpan || !r.Frame.Start.Equal(begun.UTC()) || !r.Frame.End.Equal(ended.UTC()) || r.Frame.Clipped {
			t.Errorf("%s: frame %+v, want the profiler's span %v..%v", filepath.Base(path), r.Frame, begun, ended)
		}
		// Every kernel an op launched inside the recording is credited
		// through its External id; the rest, replayed from a graph or
		// launched before the recording, carry none.
		if a := r.Attribution; a.ByExternalID != a.Events-(rankTruth.Graphed+rankTruth.PreFrame) || a.ByExternalID == 0 {
			t.Errorf("%s: attribution %+v, want all but the %d graph-replayed and %d pre-recording kernels credited through their External id",
				filepath.Base(path), a, rankTruth.Graphed, rankTruth.PreFrame)
		}
		// The reader credits the replayed kernels to their graph launch and
		// counts those from before the recording apart, exactly as written.
		if a := r.Attribution; a.ByGraph != rankTruth.Graphed || a.BeforeFrame != rankTruth.PreFrame || a.Uncredited != 0 {
			t.Errorf("%s: attribution %+v, want %d by graph, %d before the frame, none uncredited",
				filepath.Base(path), a, rankTruth.Graphed, rankTruth.PreFrame)
		}
		reports = append(reports, r)
	}
	got := torchtrace.Merge(reports...)
	if math.Abs(got.KernelUS-truth.GPUus) > 1e-3*float64(truth.Kernels) {
		t.Errorf("GPU time read %.3f µs, the simulator wrote %.3f µs in %d kernels", got.KernelUS, truth.GPUus, truth.Kernels)
	}
	if d := got.Families[torchtrace.FamilyGEMM] - truth.GEMMShare(); math.Abs(d) > 1e-6 {
		t.Errorf("GEMM share read %.6f, the simulator wrote %.6f", got.Families[torchtrace.FamilyGEMM], truth.GEMMShare())
	}
	t.Logf("%d kernels, %.0f µs of GPU time, GEMM %.2f%% (written %.2f%%), idle %.1f%%",
		truth.Kernels, got.KernelUS, 100*got.Families[torchtrace.FamilyGEMM], 100*truth.GEMMShare(), 100*got.IdleShare)
}

func gunzip(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if _, err := b.ReadFrom(zr); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// checkKinetoLayout checks one rank trace's layout against Kineto's.
func checkKinetoLayout(t *testing.T, name string, raw []byte, begun, ended time.Time) {
	t.Helper()
	if b, e := bytes.Index(raw, []byte(`"baseTimeNanoseconds"`)), bytes.Index(raw, []byte(`"traceEvents"`)); b < 0 || e < 0 || b > e {
		t.Errorf("%s: baseTimeNanoseconds at byte %d, traceEvents at %d: Kineto writes the base first", name, b, e)
	}
	var doc struct {
		Base   int64 `json:"baseTimeNanoseconds"`
		Events []struct {
			Ph, Cat, Name string
			Ts, Dur       json.Number
			Pid, Tid      any
		} `json:"traceEvents"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	g := int64(kinetoBaseGranularity)
	if doc.Base%g != 0 || doc.Base > begun.UnixNano() || begun.UnixNano()-doc.Base >= g {
		t.Errorf("%s: base %d is not the recording's start %d floored to %d ns", name, doc.Base, begun.UnixNano(), g)
	}
	abs := func(n json.Number) int64 { f, _ := n.Float64(); return doc.Base + int64(math.Round(f*1e3)) }
	var span []int64
	type iv struct{ lo, hi int64 }
	streams := map[any][]iv{}
	for _, e := range doc.Events {
		if e.Ph != "X" {
			continue
		}
		lo, hi := abs(e.Ts), abs(e.Ts)+int64(math.Round(func() float64 { f, _ := e.Dur.Float64(); return f * 1e3 }()))
		if e.Cat == "Trace" && e.Name == "PyTorch Profiler (0)" && e.Pid == "Spans" {
			span = []int64{lo, hi}
			continue
		}
		// 1 ns of slack: three decimals of µs round each end.
		if lo < begun.UnixNano()-1 || hi > ended.UnixNano()+1 {
			t.Errorf("%s: %s %q at %d..%d lies outside the recording %d..%d", name, e.Cat, e.Name, lo, hi, begun.UnixNano(), ended.UnixNano())
			return
		}
		if e.Cat == "kernel" {
			streams[e.Tid] = append(streams[e.Tid], iv{lo, hi})
		}
	}
	if span == nil || span[0] != begun.UnixNano() || span[1] != ended.UnixNano() {
		t.Errorf("%s: profiler span %v, want %d..%d", name, span, begun.UnixNano(), ended.UnixNano())
	}
	// One stream runs one kernel at a time: none overlaps the one before.
	for tid, ivs := range streams {
		slices.SortFunc(ivs, func(a, b iv) int { return cmp.Compare(a.lo, b.lo) })
		for i := 1; i < len(ivs); i++ {
			if ivs[i].lo < ivs[i-1].hi-1 {
				t.Errorf("%s: stream %v: a kernel at %d starts before the one before ends (%d)", name, tid, ivs[i].lo, ivs[i-1].hi)
				break
			}
		}
	}
}

// TestB200ReadsAsItsGEMMs: on the Blackwell option every GEMM the cost model
// ran (cuBLAS nvjet, TensorRT-LLM-gen bmm_* MoE GEMMs) reads as GEMM, so a
// GEMM regression on a B200 shows as GEMM growing, not "other".
func TestB200ReadsAsItsGEMMs(t *testing.T) {
	for _, sc := range []string{ScenarioHealthy, ScenarioUnexplained} {
		t.Run(sc, func(t *testing.T) {
			o := Options{Scenario: sc, ProfilerGPU: GPUB200, Seed: 7, ProfilerLayers: 2,
				ProfilerDir: t.TempDir(), ProfilerFlushDelay: time.Millisecond}
			s, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			h := s.Handler()
			s.Advance(15 * time.Second)
			w := torchtrace.Window{Start: s.Now()}
			post(t, h, "/start_profile")
			s.Advance(2 * time.Second)
			w.End = s.Now()
			post(t, h, "/stop_profile")
			truth := s.Profiler().LastCapture
			files, _ := filepath.Glob(filepath.Join(o.ProfilerDir, "dp0_*.pt.trace.json.gz"))
			got := analyzeFiles(t, files, w)
			if d := got.Families[torchtrace.FamilyGEMM] - truth.GEMMShare(); math.Abs(d) > 1e-6 || truth.GEMMShare() == 0 {
				t.Errorf("GEMM share read %.4f, the simulator wrote %.4f", got.Families[torchtrace.FamilyGEMM], truth.GEMMShare())
			}
			for _, e := range got.Unclassified {
				if strings.HasPrefix(e.Name, "bmm_") || strings.HasPrefix(e.Name, "nvjet") || strings.HasPrefix(e.Name, "fmhaSm100") {
					t.Errorf("%s read as unclassified (%.1f%%)", e.Name, 100*e.Share)
				}
			}
		})
	}
}
