package vllmsim

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/torchtrace"
)

// sglangFrame is frame for engine "sglang": the same warm-up and frame,
// driven through SGLang's routes with its body, and its per-rank files.
func sglangFrame(t *testing.T, o Options, warm, d time.Duration) ([]string, torchtrace.Window) {
	t.Helper()
	o.Engine = "sglang"
	o.ProfilerExportRate = 1e9
	out := t.TempDir()
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	s.Advance(warm)
	w := torchtrace.Window{Start: s.Now()}
	if code, _ := sglCall(t, h, "POST", "/start_profile", `{"output_dir": `+strconv.Quote(out)+`, "profile_prefix": "tt"}`); code != 200 {
		t.Fatalf("start: %d", code)
	}
	s.Advance(d)
	w.End = s.Now()
	if code, _ := sglCall(t, h, "POST", "/stop_profile", ""); code != 200 {
		t.Fatalf("stop: %d", code)
	}
	files, _ := filepath.Glob(filepath.Join(out, "tt-*-TP-*.trace.json.gz"))
	if len(files) != max(o.TensorParallel, 1) {
		t.Fatalf("rank traces %v", files)
	}
	return files, w
}

// TestTorchtraceReadsSGLangRankTraces: torchtrace reads each of SGLang's
// per-rank traces (SGLang's names, its header, process TP<r>), finds both
// ranks and the injected GEMM regression, and reads the same frame of the
// same engine model as it reads vLLM's files: the same mix, family by
// family.
func TestTorchtraceReadsSGLangRankTraces(t *testing.T) {
	t.Parallel()
	o := Options{TensorParallel: 2, ProfilerLayers: 4, Seed: 3, Scenario: ScenarioUnexplained}
	sf, sw := sglangFrame(t, o, 10*time.Second, 2*time.Second)
	sg := analyzeFiles(t, sf, sw)
	vf, vw := frame(t, o, 10*time.Second, 2*time.Second)
	vl := analyzeFiles(t, vf, vw)
	if len(sg.Ranks) != 2 || sg.Files != 2 || sg.KernelUS <= 0 {
		t.Fatalf("sglang: ranks %v files %d kernel time %v", sg.Ranks, sg.Files, sg.KernelUS)
	}
	if sg.Families[torchtrace.FamilyGEMM] < 0.85 || sg.TopKernels[0].Family != torchtrace.FamilyGEMM {
		t.Errorf("sglang unexplained: GEMM %.2f, top %+v; want GEMM dominant", sg.Families[torchtrace.FamilyGEMM], sg.TopKernels[0])
	}
	for _, f := range torchtrace.Families {
		if d := sg.Families[f] - vl.Families[f]; d > 0.01 || d < -0.01 {
			t.Errorf("%s: %.3f from SGLang's files, %.3f from vLLM's, same frame", f, sg.Families[f], vl.Families[f])
		}
	}
	if s := torchtrace.Summary(sg, nil); !strings.HasPrefix(s, "GEMM ") {
		t.Errorf("summary %q", s)
	}
}
