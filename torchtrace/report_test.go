package torchtrace

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/autocapture/autocapture/torchtrace/internal/gen"
)

func analyzeGen(t *testing.T, c gen.Config) (*Report, *gen.Truth) {
	t.Helper()
	data, truth := genTrace(t, c, true)
	r, err := Analyze(context.Background(), bytes.NewReader(data), Options{})
	if err != nil {
		t.Fatal(err)
	}
	return r, truth
}

func TestMergeRanks(t *testing.T) {
	r0, t0 := analyzeGen(t, gen.Config{Seed: 1, Steps: 20, Device: 0, TP: 2})
	r1, t1 := analyzeGen(t, gen.Config{Seed: 2, Steps: 25, Device: 1, TP: 2})
	m := Merge(r0, r1)
	if m.Files != 2 || len(m.Ranks) != 2 || m.Ranks[0] != 0 || m.Ranks[1] != 1 {
		t.Errorf("files %d ranks %v, want 2 files, ranks [0 1]", m.Files, m.Ranks)
	}
	if !near(m.KernelUS, t0.KernelUS+t1.KernelUS) || m.Events != t0.Events+t1.Events {
		t.Errorf("kernel µs %.1f events %d, want the sums", m.KernelUS, m.Events)
	}
	if want := (r0.IdleShare + r1.IdleShare) / 2; !near(m.IdleShare, want) {
		t.Errorf("idle %.4f, want the mean %.4f", m.IdleShare, want)
	}
	if want := (t0.FamUS["gemm"] + t1.FamUS["gemm"]) / m.KernelUS; !near(m.Families[FamilyGEMM], want) {
		t.Errorf("gemm %.4f, want %.4f", m.Families[FamilyGEMM], want)
	}
	var k0 float64
	for _, e := range r0.TopKernels {
		if e.Name == m.TopKernels[0].Name {
			k0 = e.GPUus
		}
	}
	if m.TopKernels[0].GPUus <= k0 {
		t.Errorf("top kernel %+v not summed over ranks (rank 0: %.1f)", m.TopKernels[0], k0)
	}
	// A report read back from JSON merges from its lists.
	b, _ := json.Marshal(r0)
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	mb := Merge(&back, r1)
	if !near(mb.KernelUS, m.KernelUS) || !near(mb.Families[FamilyGEMM], m.Families[FamilyGEMM]) || !near(mb.IdleShare, m.IdleShare) {
		t.Errorf("merge from JSON: %.1f %.4f %.4f, want %.1f %.4f %.4f", mb.KernelUS, mb.Families[FamilyGEMM], mb.IdleShare,
			m.KernelUS, m.Families[FamilyGEMM], m.IdleShare)
	}
}

func TestCompareAndSummary(t *testing.T) {
	healthy, _ := analyzeGen(t, gen.Config{Seed: 1, Steps: 20})
	regressed, _ := analyzeGen(t, gen.Config{Seed: 1, Steps: 20, GEMMScale: 8})
	d := Compare(regressed, healthy)
	if len(d) == 0 || d[0].Family != FamilyGEMM || d[0].Share <= d[0].Baseline+0.1 {
		t.Fatalf("deltas %+v, want gemm first and up by > 10 points", d)
	}
	for i := 1; i < len(d); i++ {
		if abs(d[i].Share-d[i].Baseline) > abs(d[i-1].Share-d[i-1].Baseline) {
			t.Errorf("deltas not by size: %+v", d)
		}
	}
	if same := Compare(healthy, healthy); len(same) != 0 {
		t.Errorf("a report against itself moved: %+v", same)
	}
	s := Summary(regressed, d)
	re := regexp.MustCompile(`^GEMM (\d+)% of GPU time \(baseline (\d+)%\) · top kernel \S.* (\d+)% · GPU idle (\d+)%$`)
	m := re.FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("summary %q", s)
	}
	if want := pct(regressed.Families[FamilyGEMM]); m[1]+"%" != want {
		t.Errorf("summary %q: GEMM share, want %s", s, want)
	}
	if !strings.Contains(s, "…") {
		t.Errorf("summary %q: long kernel name not shortened", s)
	}
	if s := Summary(healthy, nil); strings.Contains(s, "baseline") {
		t.Errorf("summary without baseline %q", s)
	}
	if s := Summary(&Report{}, nil); s != "no GPU activity in the profile" {
		t.Errorf("empty summary %q", s)
	}
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}

// TestSummarySaysWhatIsNotCredited: a trace whose kernels cannot be credited
// to an operator says so in its one line, with the reason; one that credits
// them all says nothing of it.
func TestSummarySaysWhatIsNotCredited(t *testing.T) {
	const kernels = `
	{"ph":"X","cat":"kernel","name":"ampere_sgemm_128x64_tn","pid":0,"tid":7,"ts":100,"dur":50,"args":{"External id":11,"correlation":11}},
	{"ph":"X","cat":"kernel","name":"ampere_sgemm_128x64_tn","pid":0,"tid":7,"ts":200,"dur":50,"args":{"External id":12,"correlation":12}}`
	// The External id is each kernel's own correlation and no runtime call
	// carries it: nothing links a kernel to its operator.
	orphan := `{"traceEvents": [
	{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":9,"tid":9,"ts":90,"dur":200,"args":{"External id":3}},` + kernels + `]}`
	r, err := Analyze(context.Background(), strings.NewReader(orphan), Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := Summary(r, nil)
	if r.Attribution.Uncredited != 2 || !strings.Contains(s, "operator unknown for 2 of 2 kernels, 100% of GPU time (2 no runtime call with their correlation)") {
		t.Errorf("attribution %+v, summary %q", r.Attribution, s)
	}
	// The same with the launches: the walk credits both to aten::mm.
	linked := `{"traceEvents": [
	{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":9,"tid":9,"ts":90,"dur":200,"args":{"External id":3}},
	{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":9,"tid":9,"ts":95,"dur":3,"args":{"External id":11,"correlation":11}},
	{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":9,"tid":9,"ts":195,"dur":3,"args":{"External id":12,"correlation":12}},` + kernels + `]}`
	r, err = Analyze(context.Background(), strings.NewReader(linked), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s := Summary(r, nil); r.Attribution.ByLaunch != 2 || strings.Contains(s, "unknown") || len(r.TopOps) != 1 || r.TopOps[0].Name != "aten::mm" {
		t.Errorf("attribution %+v, ops %+v, summary %q", r.Attribution, r.TopOps, s)
	}
}
