package vllmsim

import "fmt"

// The GPUs a rank's trace can show (Options.ProfilerGPU).
const (
	GPUA10G = "a10g" // Ampere (sm86): cuBLAS ampere_* and CUTLASS 2 GEMMs, FlashAttention 2
	GPUB200 = "b200" // Blackwell (sm100): cuBLAS nvjet, TensorRT-LLM-gen MoE bmm, FlashInfer's trtllm-gen FMHA
)

// kernelSet is what differs between the GPUs' kernels: the GEMMs and the
// attention. Norms, rotary embedding, cache writes, the Triton activation,
// all-reduces and the sampler are vLLM's or torch's own on either.
type kernelSet struct {
	qkv, o, up, down, lmHead kspec
	prefill, decode          kspec
}

var ampereKernels = kernelSet{qkv: kQKV, o: kOProj, up: kUp, down: kDown, lmHead: kLMHead, prefill: kPrefill, decode: kDecode}

// blackwellKernels: a B200 serving a mixture-of-experts model with NVFP4
// experts through FlashInfer's TensorRT-LLM-gen MoE, the dense projections
// through cuBLAS (nvjet) and attention through FlashInfer's trtllm-gen FMHA.
// Where each name comes from:
//   - bmm_*: TensorRT-LLM's trtllmGen_bmm_export/KernelMetaInfo.h
//     (cpp/tensorrt_llm/kernels/trtllmGenKernels/batchedGemm, commit
//     000a01de) lists the cubins as Bmm_<name>_cubin; the kernel function is
//     the lower-case bmm_<name>, as KernelRunner.cpp beside it names them.
//     The gate-up GEMM writes NVFP4 (E2m1) for the Triton SiLU; the down GEMM
//     writes bf16.
//   - nvjet_tst_*: cuBLAS 12.8+'s Hopper/Blackwell GEMMs, as profiles of
//     B200 runs print them (the 128x64 one is torchtrace's classify.go
//     example).
//   - fmhaSm100f*: trtllm-gen FMHA cubins FlashInfer loads (its
//     tests/test_artifacts.py lists fmhaSm100aKernel_… cubins of the same
//     grammar); the decode (…ForGen) and context (…PersistentContext)
//     names are those public B200 SGLang/vLLM profile reports show.
var blackwellKernels = kernelSet{
	qkv:     kspec{name: "nvjet_tst_128x64_64x8_1x2_h_bz_coopB_TNN", op: "aten::mm", outer: "aten::linear", gemm: true},
	o:       kspec{name: "nvjet_tst_64x32_64x16_2x2_2cta_h_bz_splitK_TNT", op: "aten::mm", outer: "aten::linear", gemm: true},
	up:      kspec{name: "bmm_E2m1_E2m1E2m1_Fp32_t128x8x512u2_et128x8_m128x8x64_cga1x1x1_16dp256b_TN_transOut_schedS_bN_sm100a", op: "flashinfer::trtllm_fp4_block_scale_moe", outer: "vllm::moe_forward", gemm: true},
	down:    kspec{name: "bmm_Bfloat16_E2m1E2m1_Fp32_t128x8x512u2_et128x8_m128x8x64_cga1x1x1_16dp256b_TN_transOut_schedS_bN_dynBatch_sm100a", op: "flashinfer::trtllm_fp4_block_scale_moe", outer: "vllm::moe_forward", gemm: true},
	lmHead:  kspec{name: "nvjet_tst_256x128_64x4_1x2_h_bz_coopA_NNT", op: "aten::mm", outer: "aten::linear", gemm: true, eager: true},
	prefill: kspec{name: "fmhaSm100fKernel_QkvBfloat16OBfloat16H128PagedKvSlidingOrChunkedCausalP64VarSeqQ128Kv128PersistentContext", op: "flashinfer::trtllm_batch_context_with_kv_cache", outer: "vllm::unified_attention_with_output"},
	decode:  kspec{name: "fmhaSm100fKernel_QkvBfloat16OBfloat16H128PagedKvCausalP64MultiCtasKvVarSeqQ8Kv128StaticSwapsAbForGen", op: "flashinfer::trtllm_batch_decode_with_kv_cache", outer: "vllm::unified_attention_with_output"},
}

func gpuKernels(gpu string) kernelSet {
	if gpu == GPUB200 {
		return blackwellKernels
	}
	return ampereKernels
}

// deviceProperties is the trace header's deviceProperties entry for a rank.
// The B200's carries the keys current Kineto writes (the HF H100 trace's
// layout, regsPerMultiprocessor to sharedMemPerMultiprocessor included):
// sm_100, 148 SMs, 183,359 MiB as the driver reports it.
func deviceProperties(gpu string, rank int) string {
	if gpu == GPUB200 {
		return fmt.Sprintf(`{
      "id": %d, "name": "NVIDIA B200", "totalGlobalMem": 192265846784,
      "computeMajor": 10, "computeMinor": 0,
      "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
      "regsPerBlock": 65536, "warpSize": 32,
      "sharedMemPerBlock": 49152, "numSms": 148,
      "regsPerMultiprocessor": 65536, "sharedMemPerBlockOptin": 232448, "sharedMemPerMultiprocessor": 233472
    }`, rank)
	}
	return fmt.Sprintf(`{
      "id": %d, "name": "NVIDIA A10G (simulated)", "totalGlobalMem": 23836098560,
      "computeMajor": 8, "computeMinor": 6,
      "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 1536,
      "regsPerBlock": 65536, "warpSize": 32,
      "sharedMemPerBlock": 49152, "numSms": 80
    }`, rank)
}
