package torchtrace

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// llmTraces are the real LLM-inference traces (llm-traces/ under
// $AUTOCAPTURE_FIXTURES; origins in its SOURCES.md). span: the file has the
// profiler's span, so it is also held to the full reference reading
// (realref_test.go). peerIdle: TraceLens publishes a GPU timeline whose
// window is ours (first to last GPU event, for the cuts).
var llmTraces = []struct {
	file     string
	span     bool
	peerIdle bool
}{
	{"hf_qwen1.5-0.5b-chat_h100_forward.json.gz", true, false},
	{"sglang_qwen3-8b_mi300x_prefilldecode.CUT.json.gz", false, true},
	{"vllm_gpt-oss_mi300x_prefilldecode_piecewise.CUT.json.gz", false, true},
	{"nano-vllm_qwen3_rtx4080laptop_decode_attn.json.gz", true, false},
}

// llmFamily is a kernel's family written from what the libraries these
// traces ran name their kernels, apart from Classify: substrings of the
// name as the trace writes it (mangled ROCm names included), first match
// wins. Inductor's pointwise/reduction kernels and triton_kernels' MoE
// finalize are other; the KV-cache writes are attention.
func llmFamily(cat, name string) Family {
	n := strings.ToLower(name)
	if c := strings.ToLower(cat); c == "gpu_memcpy" || c == "gpu_memset" || strings.HasPrefix(n, "memcpy") || strings.HasPrefix(n, "memset") {
		return FamilyMemory
	}
	table := []struct {
		sub string
		fam Family
	}{
		{"triton_poi_", FamilyOther}, {"triton_red_", FamilyOther}, {"triton_per_", FamilyOther},
		{"_finalize_matmul", FamilyOther},
		{"nccl", FamilyCommunication}, {"all_reduce", FamilyCommunication},
		{"flash_fwd", FamilyAttention}, {"fmha", FamilyAttention}, {"paged_attention", FamilyAttention},
		{"unified_attention", FamilyAttention}, {"attn_fwd", FamilyAttention}, {"reduce_segments", FamilyAttention},
		{"reshape_and_cache", FamilyAttention}, {"store_kvcache", FamilyAttention},
		{"cijk_", FamilyGEMM}, {"gemm", FamilyGEMM}, {"_matmul_ogs_", FamilyGEMM}, {"bmm_", FamilyGEMM}, {"nvjet", FamilyGEMM},
	}
	for _, e := range table {
		if strings.Contains(n, e.sub) {
			return e.fam
		}
	}
	return FamilyOther
}

// llmRealTraces holds each LLM-inference trace to the independent family
// table (within 2 points), requires 90% of its GPU time credited, the
// unclassified kernels listed, and where TraceLens measured the same window,
// its idle share (within half a point).
func llmRealTraces(t *testing.T, dir string) {
	for _, tr := range llmTraces {
		t.Run(strings.TrimSuffix(tr.file, ".json.gz"), func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(filepath.Join(dir, tr.file))
			if err != nil {
				t.Fatal(err)
			}
			r, err := Analyze(context.Background(), bytes.NewReader(data), Options{Top: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			famUS, total := map[Family]float64{}, 0.0
			for _, e := range decodeRef(t, data).Events {
				c := strings.ToLower(e.Cat)
				if e.Ph == "X" && (c == "kernel" || c == "gpu_memcpy" || c == "gpu_memset") {
					us := float64(ns(e.Dur)) / 1e3
					famUS[llmFamily(e.Cat, e.Name)] += us
					total += us
				}
			}
			for _, f := range Families {
				if want := famUS[f] / total; math.Abs(r.Families[f]-want) > 0.02 {
					t.Errorf("%s %.2f%%, the independent table %.2f%%", f, 100*r.Families[f], 100*want)
				}
			}
			if c := r.Attribution.CreditedTime(); c < 0.9 {
				t.Errorf("%.1f%% of GPU time credited (%+v), want ≥ 90%%", 100*c, r.Attribution)
			}
			var unclassified float64
			for _, e := range r.Unclassified {
				unclassified += e.Share
				if e.Family != FamilyOther {
					t.Errorf("unclassified %s is %s", e.Name, e.Family)
				}
			}
			if math.Abs(unclassified-r.Families[FamilyOther]) > 1e-9 {
				t.Errorf("unclassified kernels sum to %.4f, other is %.4f", unclassified, r.Families[FamilyOther])
			}
			if tr.peerIdle {
				if want := tracelensIdle(t, dir, tr.file); math.Abs(r.IdleShare-want) > 0.005 {
					t.Errorf("idle %.3f%%, TraceLens %.3f%%", 100*r.IdleShare, 100*want)
				}
			}
			if tr.span {
				checkAgainstReference(t, data)
			}
			var fams []string
			for _, f := range Families {
				fams = append(fams, fmt.Sprintf("%s %.1f%% (table %.1f%%)", f, 100*r.Families[f], 100*famUS[f]/total))
			}
			t.Logf("LLM %s | %s | idle %.2f%% | credited %.1f%% of time, %.1f%% of kernels",
				tr.file, strings.Join(fams, ", "), 100*r.IdleShare, 100*r.Attribution.CreditedTime(), 100*r.Attribution.Credited())
		})
	}
}

// tracelensIdle is the idle share of TraceLens's GPU timeline for file.
func tracelensIdle(t *testing.T, dir, file string) float64 {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "peer", "tracelens", file+".gpu_timeline.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range rows {
		if len(row) == 3 && row[0] == "idle_time" {
			pct, err := strconv.ParseFloat(row[2], 64)
			if err != nil {
				t.Fatal(err)
			}
			return pct / 100
		}
	}
	t.Fatalf("%s: no idle_time row", file)
	return 0
}
