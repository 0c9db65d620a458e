package vllmsim

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/torchtrace"
)

// frame runs a sim for warm, then records a frame of length d, and returns
// the rank trace files and the frame's wall-clock window.
func frame(t *testing.T, o Options, warm, d time.Duration) ([]string, torchtrace.Window) {
	t.Helper()
	o.ProfilerDir = t.TempDir()
	if o.ProfilerFlushDelay == 0 {
		o.ProfilerFlushDelay = time.Millisecond
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	s.Advance(warm)
	w := torchtrace.Window{Start: s.Now()}
	post(t, h, "/start_profile")
	s.Advance(d)
	w.End = s.Now()
	post(t, h, "/stop_profile")
	files, _ := filepath.Glob(filepath.Join(o.ProfilerDir, "dp0_*.pt.trace.json.gz"))
	if len(files) != o.TensorParallel && !(o.TensorParallel == 0 && len(files) == 1) {
		t.Fatalf("rank traces %v", files)
	}
	return files, w
}

// analyzeFiles reads every rank's trace with torchtrace and merges them.
func analyzeFiles(t *testing.T, files []string, w torchtrace.Window) *torchtrace.Report {
	t.Helper()
	var reps []*torchtrace.Report
	for _, path := range files {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		r, err := torchtrace.Analyze(context.Background(), f, torchtrace.Options{Window: w, Top: 30})
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		reps = append(reps, r)
	}
	return torchtrace.Merge(reps...)
}

// TestProfileReadsAsTheCause: torchtrace over the sim's own files finds the
// injected GEMM regression, and a healthy frame reads as a different mix.
func TestProfileReadsAsTheCause(t *testing.T) {
	o := Options{TensorParallel: 2, ProfilerLayers: 4, Seed: 3}
	o.Scenario = ScenarioHealthy
	hf, hw := frame(t, o, 15*time.Second, 3*time.Second)
	healthy := analyzeFiles(t, hf, hw)
	o.Scenario = ScenarioUnexplained
	uf, uw := frame(t, o, 15*time.Second, 3*time.Second)
	regressed := analyzeFiles(t, uf, uw)

	for name, r := range map[string]*torchtrace.Report{"healthy": healthy, "unexplained": regressed} {
		if len(r.Ranks) != 2 || r.Files != 2 {
			t.Errorf("%s: ranks %v files %d, want both ranks", name, r.Ranks, r.Files)
		}
		if r.Families[torchtrace.FamilyCommunication] <= 0 || r.Families[torchtrace.FamilyMemory] <= 0 {
			t.Errorf("%s: TP=2 trace without all-reduce or copies: %v", name, r.Families)
		}
		// Decode replays from a CUDA graph, whose kernels are credited to the
		// graph launch: of the operators that launched their own kernels,
		// the GEMMs' comes first.
		var eager []string
		graphed := false
		for _, op := range r.TopOps {
			if strings.HasPrefix(op.Name, "cudaGraphLaunch") {
				graphed = true
				continue
			}
			eager = append(eager, op.Name)
		}
		if !graphed || len(eager) == 0 || eager[0] != "aten::mm" {
			t.Errorf("%s: top ops %v, want a graph launch and aten::mm (the GEMMs' operator) first of the rest", name, r.TopOps)
		}
		if r.Window.Start.Before(hw.Start) && name == "healthy" {
			t.Errorf("%s: activity before the frame read: %v < %v", name, r.Window.Start, hw.Start)
		}
	}
	gemmH, gemmU := healthy.Families[torchtrace.FamilyGEMM], regressed.Families[torchtrace.FamilyGEMM]
	if gemmU < 0.85 || regressed.TopKernels[0].Family != torchtrace.FamilyGEMM {
		t.Errorf("unexplained: GEMM %.2f of GPU time, top kernel %+v; want GEMM dominant", gemmU, regressed.TopKernels[0])
	}
	if gemmH > 0.75 || healthy.Families[torchtrace.FamilyAttention] < 0.15 {
		t.Errorf("healthy: GEMM %.2f, attention %.2f; want the usual mix", gemmH, healthy.Families[torchtrace.FamilyAttention])
	}
	d := torchtrace.Compare(regressed, healthy)
	if len(d) == 0 || d[0].Family != torchtrace.FamilyGEMM || d[0].Share-d[0].Baseline < 0.2 {
		t.Errorf("compare: %+v, want gemm first, up > 20 points", d)
	}
	if healthy.IdleShare <= regressed.IdleShare {
		t.Errorf("idle healthy %.3f vs unexplained %.3f: longer GEMM steps leave the GPU less idle", healthy.IdleShare, regressed.IdleShare)
	}
	s := torchtrace.Summary(regressed, d)
	if !strings.HasPrefix(s, "GEMM ") || !strings.Contains(s, "(baseline ") {
		t.Errorf("summary %q", s)
	}
	t.Logf("unexplained: %s", s)
	t.Logf("healthy: %s; families %v", torchtrace.Summary(healthy, nil), healthy.Families)
}

// TestProfileSizeFollowsFrameAndLoad: twice the frame, about twice the
// file; no load, no iterations, almost nothing.
func TestProfileSizeFollowsFrameAndLoad(t *testing.T) {
	size := func(o Options, d time.Duration) int64 {
		files, _ := frame(t, o, 10*time.Second, d)
		fi, err := os.Stat(files[0])
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	o := Options{ProfilerLayers: 2, Seed: 4}
	short, long := size(o, 2*time.Second), size(o, 4*time.Second)
	if r := float64(long) / float64(short); r < 1.6 || r > 2.4 {
		t.Errorf("2 s frame %d bytes, 4 s frame %d bytes: ratio %.2f, want ~2", short, long, r)
	}
	o.Load = NoLoad
	if idle := size(o, 4*time.Second); idle*20 > long {
		t.Errorf("an idle engine's 4 s trace is %d bytes, a loaded one %d", idle, long)
	}
}

// TestProfileMixIndependentOfLayers: fewer layers written, same shares.
func TestProfileMixIndependentOfLayers(t *testing.T) {
	t.Parallel()
	mix := func(layers int, eager bool) *torchtrace.Report {
		files, w := frame(t, Options{TensorParallel: 2, ProfilerLayers: layers, Seed: 5, EnforceEager: eager}, 10*time.Second, 2*time.Second)
		return analyzeFiles(t, files, w)
	}
	// Eager, every kernel brings its op, launch and flow rows; replayed
	// from graphs, the per-step rows outside them weigh more.
	for _, c := range []struct {
		eager bool
		ratio int64
	}{{true, 6}, {false, 4}} {
		few, many := mix(2, c.eager), mix(16, c.eager)
		for _, f := range torchtrace.Families {
			if d := few.Families[f] - many.Families[f]; d > 0.01 || d < -0.01 {
				t.Errorf("eager %v: %s: %.3f with 2 layers, %.3f with 16", c.eager, f, few.Families[f], many.Families[f])
			}
		}
		if many.Events < c.ratio*few.Events {
			t.Errorf("eager %v: events: %d with 2 layers, %d with 16", c.eager, few.Events, many.Events)
		}
	}
}
