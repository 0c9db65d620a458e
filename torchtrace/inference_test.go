package torchtrace

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func analyzeString(t *testing.T, trace string) *Report {
	t.Helper()
	r, err := Analyze(context.Background(), strings.NewReader(trace), Options{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestGraphReplayCredited: kernels replayed from a graph carry the graph
// launch's correlation and no External id; they are credited to the launch
// and the innermost frame around it a reader can act on, skipping the
// frames that only replay the graph; a launch nothing encloses is credited
// on its own.
func TestGraphReplayCredited(t *testing.T) {
	r := analyzeString(t, `{"traceEvents": [
	{"ph":"X","cat":"python_function","name":"vllm/v1/worker/gpu_model_runner.py(3102): _model_forward","pid":1,"tid":1,"ts":0,"dur":100},
	{"ph":"X","cat":"python_function","name":"vllm/compilation/cuda_graph.py(208): __call__","pid":1,"tid":1,"ts":5,"dur":90},
	{"ph":"X","cat":"python_function","name":"/usr/lib/python3/site-packages/torch/cuda/graphs.py(139): replay","pid":1,"tid":1,"ts":6,"dur":80},
	{"ph":"X","cat":"python_function","name":"<built-in method replay of PyCapsule>","pid":1,"tid":1,"ts":7,"dur":70},
	{"ph":"X","cat":"cuda_runtime","name":"hipGraphLaunch","pid":1,"tid":1,"ts":8,"dur":60,"args":{"cid":215,"correlation":50}},
	{"ph":"X","cat":"cuda_runtime","name":"cudaGraphLaunch","pid":1,"tid":1,"ts":300,"dur":5,"args":{"correlation":60}},
	{"ph":"X","cat":"kernel","name":"_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1","pid":2,"tid":0,"ts":20,"dur":30,"args":{"correlation":50}},
	{"ph":"X","cat":"kernel","name":"kernel_unified_attention_3d","pid":2,"tid":0,"ts":50,"dur":10,"args":{"correlation":50}},
	{"ph":"X","cat":"kernel","name":"triton_poi_fused_0","pid":2,"tid":0,"ts":60,"dur":10,"args":{"correlation":50}},
	{"ph":"X","cat":"kernel","name":"triton_poi_fused_0","pid":2,"tid":0,"ts":310,"dur":50,"args":{"correlation":60}}
	]}`)
	a := r.Attribution
	if a.ByGraph != 4 || a.Uncredited != 0 || a.CreditedTime() != 1 || !near(a.ByGraphUS, 100) {
		t.Errorf("attribution %+v, want 4 kernels (100 µs) by graph", a)
	}
	ops := map[string]float64{}
	for _, e := range r.TopOps {
		ops[e.Name] = e.GPUus
	}
	if ops["hipGraphLaunch in vllm/v1/worker/gpu_model_runner.py(3102): _model_forward"] != 50 || ops["cudaGraphLaunch"] != 50 || len(ops) != 2 {
		t.Errorf("operators %v", ops)
	}
	if s := Summary(r, nil); !strings.Contains(s, "replayed from CUDA graphs: 4 kernels, 100% of GPU time") || strings.Contains(s, "unknown") {
		t.Errorf("summary %q", s)
	}
}

// TestBeforeFrame: kernels whose launches precede the recording (their
// correlation below every runtime call's) are counted apart, credited to
// the operator credited with most of the same kernel in the frame, and
// never called uncredited; a kernel with no correlation at all is.
func TestBeforeFrame(t *testing.T) {
	r := analyzeString(t, `{"traceEvents": [
	{"ph":"X","cat":"cpu_op","name":"aten::mul","pid":1,"tid":1,"ts":100,"dur":20,"args":{"External id":7}},
	{"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,"ts":130,"dur":20,"args":{"External id":8}},
	{"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,"ts":160,"dur":20,"args":{"External id":9}},
	{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":101,"dur":2,"args":{"External id":7,"correlation":500}},
	{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":131,"dur":2,"args":{"External id":8,"correlation":501}},
	{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":161,"dur":2,"args":{"External id":9,"correlation":502}},
	{"ph":"X","cat":"kernel","name":"elementwise_kernel<MulFunctor>","pid":0,"tid":7,"ts":0,"dur":40,"args":{"correlation":401}},
	{"ph":"X","cat":"kernel","name":"elementwise_kernel<AddFunctor>","pid":0,"tid":7,"ts":40,"dur":20,"args":{"correlation":402}},
	{"ph":"X","cat":"kernel","name":"reduce_kernel","pid":0,"tid":7,"ts":60,"dur":10,"args":{"correlation":403}},
	{"ph":"X","cat":"kernel","name":"elementwise_kernel<MulFunctor>","pid":0,"tid":7,"ts":105,"dur":10,"args":{"External id":7,"correlation":500}},
	{"ph":"X","cat":"kernel","name":"elementwise_kernel<AddFunctor>","pid":0,"tid":7,"ts":135,"dur":10,"args":{"External id":8,"correlation":501}},
	{"ph":"X","cat":"kernel","name":"elementwise_kernel<AddFunctor>","pid":0,"tid":7,"ts":165,"dur":10,"args":{"External id":9,"correlation":502}},
	{"ph":"X","cat":"kernel","name":"sm90_xmma_gemm","pid":0,"tid":7,"ts":200,"dur":10}
	]}`)
	a := r.Attribution
	if a.BeforeFrame != 3 || !near(a.BeforeFrameUS, 70) || a.ByKernelName != 2 || !near(a.ByKernelNameUS, 60) ||
		a.ByExternalID != 3 || a.Uncredited != 1 {
		t.Errorf("attribution %+v: want 3 before the frame (70 µs), 2 of them by name (60 µs), 3 by External id, 1 uncredited", a)
	}
	ops := map[string]float64{}
	for _, e := range r.TopOps {
		ops[e.Name] = e.GPUus
	}
	if ops["aten::mul"] != 50 || ops["aten::add"] != 40 {
		t.Errorf("operators %v, want aten::mul 50 µs, aten::add 40 µs", ops)
	}
	s := Summary(r, nil)
	if !strings.Contains(s, "launched before the frame: 3 kernels, 64% of GPU time") ||
		!strings.Contains(s, "operator unknown for 1 of 7 kernels, 9% of GPU time (1 no External id or correlation)") {
		t.Errorf("summary %q", s)
	}
}

// TestLaunchFromPython: a Triton kernel launched through the driver API
// from Python, with no cpu_op around it, is credited to the Python frame
// that called it (Triton's own launcher frames skipped).
func TestLaunchFromPython(t *testing.T) {
	r := analyzeString(t, `{"traceEvents": [
	{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":0,"dur":10,"args":{"External id":3}},
	{"ph":"X","cat":"python_function","name":"nanovllm/layers/attention.py(60): store_kvcache","pid":1,"tid":1,"ts":20,"dur":30},
	{"ph":"X","cat":"python_function","name":"triton/runtime/jit.py(547): run","pid":1,"tid":1,"ts":21,"dur":20},
	{"ph":"X","cat":"cuda_driver","name":"cuLaunchKernelEx","pid":1,"tid":1,"ts":25,"dur":5,"args":{"correlation":20}},
	{"ph":"X","cat":"kernel","name":"store_kvcache_kernel","pid":0,"tid":7,"ts":30,"dur":4,"args":{"correlation":20}}
	]}`)
	if a := r.Attribution; a.ByFrame != 1 || a.Uncredited != 0 || len(r.TopOps) != 1 ||
		r.TopOps[0].Name != "nanovllm/layers/attention.py(60): store_kvcache" {
		t.Errorf("attribution %+v, ops %+v", a, r.TopOps)
	}
}

// TestUnclassifiedNamed: the report lists the largest kernels of family
// other; the summary names them when other leads or grew against the
// baseline, not otherwise; Merge and a report read back from JSON keep them.
func TestUnclassifiedNamed(t *testing.T) {
	const head = `{"traceEvents": [
	{"ph":"X","cat":"kernel","name":"nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT","pid":0,"tid":7,"ts":0,"dur":%s},`
	mk := func(gemm string) string {
		return strings.Replace(head, "%s", gemm, 1) + `
	{"ph":"X","cat":"kernel","name":"_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256ELi16ELb1ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_diiiiiiib","pid":0,"tid":7,"ts":100,"dur":30},
	{"ph":"X","cat":"kernel","name":"triton_poi_fused_add_all_reduce_mul_0","pid":0,"tid":7,"ts":200,"dur":20}
	]}`
	}
	r := analyzeString(t, mk("10"))
	if len(r.Unclassified) != 2 || r.Unclassified[0].Name != "void aiter::add_rmsnorm_quant_kernel<std::bfloat16_t, std::bfloat16_t, 256, 16, true, false, true, 1>(std::bfloat16_t*, std::bfloat16_t*, float*, std::bfloat16_t*, std::bfloat16_t*, std::bfloat16_t*, double, int, int, int, int, int, int, int, bool)" ||
		r.Unclassified[1].Name != "triton_poi_fused_add_all_reduce_mul_0" {
		t.Fatalf("unclassified %+v", r.Unclassified)
	}
	if s := Summary(r, nil); !strings.HasPrefix(s, "other 83% of GPU time: add_rmsnorm_quant_kernel 50%, triton_poi_fused_add_all_reduce_mul_0 33% ·") {
		t.Errorf("summary %q", s)
	}
	base := analyzeString(t, mk("500"))
	if s := Summary(base, nil); strings.Contains(s, "add_rmsnorm") {
		t.Errorf("GEMM leads, other did not grow: summary %q names other", s)
	}
	cur := analyzeString(t, mk("60"))
	if s := Summary(cur, Compare(cur, base)); !strings.HasPrefix(s, "other 45% of GPU time (baseline 9%): add_rmsnorm_quant_kernel 27%") {
		t.Errorf("other grew against the baseline: summary %q", s)
	}
	// GEMM grew and leads, other is still the largest family: named apart.
	grew := analyzeString(t, mk("40"))
	if s := Summary(grew, Compare(grew, r)); !strings.HasPrefix(s, "GEMM 44% of GPU time (baseline 17%) · other 56%: add_rmsnorm_quant_kernel 33%") {
		t.Errorf("other largest, GEMM leads: summary %q", s)
	}
	b, _ := json.Marshal(r)
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	m := Merge(&back, r)
	if len(m.Unclassified) != 2 || m.Unclassified[0].Count != 2 || !near(m.Unclassified[0].GPUus, 60) {
		t.Errorf("merged unclassified %+v", m.Unclassified)
	}
}
