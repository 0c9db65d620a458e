package torchtrace

import (
	"strings"

	"github.com/ianlancetaylor/demangle"
)

// GPU event categories as Kineto names them (libkineto ActivityType.cpp:
// "kernel", "gpu_memcpy", "gpu_memset", "cpu_op", "cuda_runtime",
// "cuda_driver"), and as PyTorch 1.9's Kineto spelled them ("Kernel",
// "Memcpy", "Memset", "Operator", "Runtime": the tb_plugin samples of
// 2021-06). Categories are matched without regard to case.
const (
	catKernel   = "kernel"
	catMemcpy   = "gpu_memcpy"
	catMemset   = "gpu_memset"
	catMemcpy19 = "memcpy"
	catMemset19 = "memset"
	catCPUOp    = "cpu_op"
	catOp19     = "operator"
	catRuntime  = "cuda_runtime" // ROCm traces use it too (hta/amd_trace)
	catDriver   = "cuda_driver"
	catRT19     = "runtime"
	catTrace    = "trace" // the profiler's own span, "PyTorch Profiler (0)"
	// Enclosers of graph launches (graphs.go): record_function and NVTX
	// ranges, and the Python stack (with_stack=True).
	catAnnotation = "user_annotation"
	catPython     = "python_function"
)

// isCopyCat says whether cat is one of the copy categories (the copy
// engines' work, not the SMs').
func isCopyCat(cat []byte) bool {
	return isCat(cat, catMemcpy) || isCat(cat, catMemset) || isCat(cat, catMemcpy19) || isCat(cat, catMemset19)
}

// ruleKind says which part of a kernel's name a rule reads.
type ruleKind uint8

const (
	fnPrefix   ruleKind = iota // the function's identifier starts with pat
	fnContains                 // the identifier contains pat
	inNS                       // one of the namespaces is pat
	nsPrefix                   // one of the namespaces starts with pat
)

// rule is one pattern of a family, with where the name comes from.
type rule struct {
	fam  Family
	kind ruleKind
	pat  string // lower case
}

// rules are tried in order; the first match wins. Communication comes first
// (vLLM's custom all-reduce is no GEMM whatever its template arguments),
// then attention (FlashAttention 3 runs as cutlass::device_kernel<flash::…>,
// so it must win over CUTLASS), then GEMM. Each group cites where its names
// come from: a library's source file, or a real trace in the fixtures.
//
// Decisions (the README lists them all):
//   - KV-cache writes (reshape_and_cache, store_kvcache, …) are attention:
//     they run once per layer inside it and grow with the tokens attended.
//   - MoE routing and finalize are other: no matrix product, and a reader
//     weighing the experts' GEMMs must not see their time.
//   - Inductor's triton_{poi,red,per}_fused_* are other whatever ops their
//     fused name lists (…_all_reduce_…, …_moe_…); triton_tem_fused_*mm* are GEMM.
//   - Implicit-GEMM convolutions are GEMM; other cuDNN kernels, fused
//     elementwise kernels, softmax and sampling are other.
var rules = []rule{
	// MoE routing and finalize (see Decisions): TRT-LLM-gen's
	// moe::dev::routing::routingIndicesHistogramKernel,
	// moe::dev::finalize::finalizeKernelVecLoad run by FlashInfer's
	// trtllm_fp4_block_scale_moe (flashinfer csrc/trtllm_fused_moe_routing_*.cu,
	// trtllm_fused_moe_dev_kernel.cu; fixtures: TraceLens b200/eager_trace);
	// TRT-LLM's CUTLASS MoE finalizeMoeRoutingKernel, expandInputRowsKernel
	// (tensorrt_llm/kernels/cutlass_kernels/moe_gemm); triton_kernels'
	// _finalize_matmul_scatter, _combined_routing_compute, _topk_forward
	// (openai/triton python/triton_kernels/triton_kernels/routing.py,
	// matmul_ogs_details/_finalize_matmul.py; fixtures: llm-traces vLLM
	// gpt-oss); vLLM's moe_align_block_size_kernel, topkGatingSoftmax
	// (csrc/moe/).
	{FamilyOther, inNS, "routing"},
	{FamilyOther, inNS, "finalize"},
	{FamilyOther, fnPrefix, "_finalize_matmul"},
	{FamilyOther, fnContains, "moerouting"},
	{FamilyOther, fnContains, "expandinputrows"},

	// NCCL ≤ 2.18 ncclKernel_AllReduce_RING_LL_Sum_float (fixtures:
	// hta/nccl_parser_config, hta/trace_filter); NCCL ≥ 2.19
	// ncclDevKernel_AllReduce_Sum_bf16_RING_LL (NVIDIA/nccl
	// src/device/generate.py); RCCL ncclDevKernel_Generic (ROCm/rccl
	// src/device/common.cu) and its MSCCL kernels (msccl_kernel_impl.h).
	{FamilyCommunication, fnPrefix, "nccl"},
	{FamilyCommunication, fnPrefix, "msccl"},
	// vLLM's custom all-reduce cross_device_reduce_1stage / _2stage
	// (vllm csrc/custom_all_reduce.cuh; hipified as-is for ROCm).
	{FamilyCommunication, fnContains, "cross_device_reduce"},
	// FlashInfer's comm kernels allreduce_fusion_kernel_oneshot_lamport,
	// oneShotAllReduceKernel, allgather_kernel, reducescatter_kernel,
	// moeAllToAllKernel (flashinfer include/flashinfer/comm/); PyTorch's
	// symmetric-memory one_shot_all_reduce_kernel, multimem_all_reduce_kernel
	// (torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemoryOps.cu).
	{FamilyCommunication, fnContains, "all_reduce"},
	{FamilyCommunication, fnContains, "allreduce"},
	{FamilyCommunication, fnContains, "all_gather"},
	{FamilyCommunication, fnContains, "allgather"},
	{FamilyCommunication, fnContains, "reduce_scatter"},
	{FamilyCommunication, fnContains, "reducescatter"},
	{FamilyCommunication, fnContains, "alltoall"},
	{FamilyCommunication, fnContains, "all_to_all"},
	// ROCm quick all-reduce allreduce_prototype_twoshot (vllm
	// csrc/quickreduce/quick_reduce_impl.cuh) reads as allreduce above.
	// DeepEP's expert-parallel dispatch/combine (deepseek-ai/DeepEP
	// csrc/kernels/intranode.cu, internode.cu: namespace deep_ep).
	{FamilyCommunication, inNS, "deep_ep"},

	// FlashAttention 3 cutlass::device_kernel<flash::enable_sm90_or_later<
	// flash::FlashAttnFwdSm90<…>>> (Dao-AILab/flash-attention hopper/) and
	// FlashMLA (namespace flash); FlashAttention 2 flash_fwd_kernel,
	// flash_fwd_splitkv_kernel, flash_fwd_splitkv_combine_kernel, flash_bwd_…
	// (csrc/flash_attn/src/flash_fwd_launch_template.h; vLLM runs its fork
	// vllm-flash-attn; PyTorch's copy is namespace pytorch_flash).
	{FamilyAttention, inNS, "flash"},
	{FamilyAttention, inNS, "pytorch_flash"},
	{FamilyAttention, fnPrefix, "flash_"},
	// xformers / PyTorch memory-efficient attention fmha_cutlassF_f16_aligned_
	// 64x64_rf_sm80 (facebookresearch/xformers xformers/csrc/attention/cuda/
	// fmha/kernels/), CK ck_tile::FmhaFwdKernel (ROCm/composable_kernel
	// include/ck_tile/ops/fmha/), aiter's fmha_fwd_* (ROCm/aiter), TRT-LLM-gen
	// fmhaSm100… run by FlashInfer, CUTLASS Sm100FmhaMlaKernel.
	{FamilyAttention, fnContains, "fmha"},
	// vLLM paged_attention_v1_kernel / _v2_kernel / _v2_reduce_kernel (vllm
	// csrc/attention/paged_attention_v1.cu, _v2.cu), ROCm
	// paged_attention_ll4mi_QKV_mfma16_kernel (csrc/rocm/attention.cu), Triton
	// kernel_unified_attention_2d/_3d (vllm/attention/ops/
	// triton_unified_attention.py), kernel_paged_attention_2d
	// (chunked_prefill_paged_decode.py), _attn_fwd (triton_flash_attention.py),
	// merge_attn_states_kernel (csrc/attention/merge_attn_states.cu), FlashInfer
	// BatchMLAPagedAttentionKernel (include/flashinfer/attention/mla.cuh).
	{FamilyAttention, fnContains, "attention"},
	{FamilyAttention, fnContains, "attn"},
	// vLLM's Triton prefix prefill _fwd_kernel / _fwd_kernel_alibi
	// (vllm/attention/ops/prefix_prefill.py) and decode _fwd_kernel_stage1/2,
	// _fwd_grouped_kernel_stage1 (triton_decode_attention.py); the 3-D unified
	// attention's reduce_segments.
	{FamilyAttention, fnPrefix, "_fwd_kernel"},
	{FamilyAttention, fnPrefix, "_fwd_grouped_kernel"},
	{FamilyAttention, fnPrefix, "reduce_segments"},
	// FlashInfer BatchDecodeWithPagedKVCacheKernel, BatchPrefillWithPagedKVCache
	// Kernel, BatchPrefillWithRaggedKVCacheKernel, SingleDecodeWithKVCacheKernel,
	// BatchPODWithKVCacheTensorKernel (include/flashinfer/attention/decode.cuh,
	// prefill.cuh, pod.cuh), MergeStateKernel / MergeStatesKernel (cascade.cuh),
	// AppendPagedKVCacheKernel (page.cuh).
	{FamilyAttention, fnContains, "withkvcache"},
	{FamilyAttention, fnContains, "withpagedkvcache"},
	{FamilyAttention, fnContains, "withraggedkvcache"},
	{FamilyAttention, fnContains, "mergestate"},
	{FamilyAttention, fnContains, "appendpagedkv"},
	// vLLM reshape_and_cache_kernel, reshape_and_cache_flash_kernel,
	// concat_and_cache_mla_kernel (vllm csrc/cache_kernels.cu).
	{FamilyAttention, fnContains, "reshape_and_cache"},
	{FamilyAttention, fnContains, "concat_and_cache_mla"},
	// SGLang's store_kvcache<…> (sgl-kernel csrc/memory/store.cu; fixtures:
	// llm-traces SGLang MI300X) and nano-vllm's Triton store_kvcache_kernel
	// (nanovllm/layers/attention.py; fixtures: llm-traces nano-vllm).
	{FamilyAttention, fnContains, "store_kvcache"},

	// cuBLAS ampere_sgemm_32x32_sliced1x4_tn, volta_sgemm_128x64_nn,
	// ampere_gcgemm_64x64_nt, gemmk1_kernel (fixtures: hta/critical_path,
	// hta/df_index_resolver, hta/trace_file_list), sm90_xmma_gemm_… (PROFILES.md);
	// CUTLASS 2 cutlass::Kernel<cutlass_80_tensorop_s1688gemm_…> (fixtures:
	// hta/nccl_parser_config) and CUTLASS 3 cutlass::device_kernel<cutlass::
	// gemm::kernel::GemmUniversal<…>>; CK ck::kernel_gemm_xdl_cshuffle_v3
	// (ROCm/composable_kernel include/ck/tensor_operation/gpu/grid/
	// gridwise_gemm_xdl_cshuffle_v3.hpp); DeepGEMM, vLLM awq_gemm_kernel; cuDNN
	// implicit_convolve_sgemm (fixtures: kineto-tb_plugin).
	{FamilyGEMM, fnContains, "gemm"},
	// cuBLAS gemv2T_kernel_val / gemvx, rocBLAS rocblas_gemvn_kernel.
	{FamilyGEMM, fnContains, "gemv"},
	// cuDNN/cuBLAS xmma kernels sm80_xmma_fprop_implicit_gemm_…
	// (fixtures: hta/critical_path).
	{FamilyGEMM, fnContains, "xmma"},
	// cuBLAS 12 on Hopper/Blackwell: nvjet_tst_128x64_64x8_1x2_h_bz_coopB_TNN.
	{FamilyGEMM, fnPrefix, "nvjet"},
	// Tensile GEMMs as hipBLASLt and rocBLAS name them, Cijk_Alik_Bljk_SB_…
	// (ROCm/Tensile Tensile/SolutionStructs.py; fixtures: hta/amd_trace).
	{FamilyGEMM, fnPrefix, "cijk_"},
	// cuBLASLt's split-K reduction cublasLt::splitKreduce_kernel. hipBLASLt's
	// GlobalSplitU reductions are Tensile kernels too (Cijk_…_PostGSU…,
	// ROCm/hipBLASLt tensilelite/Tensile/KernelWriterConversion.py): cijk_.
	{FamilyGEMM, inNS, "cublaslt"},
	{FamilyGEMM, fnContains, "splitkreduce"},
	// Triton matmuls (matmul_kernel, vLLM _w8a8_block_fp8_matmul) and vLLM's
	// fused_moe_kernel (vllm/model_executor/layers/fused_moe/fused_moe.py),
	// cutlass_scaled_mm, Marlin marlin::Marlin<…> (csrc/quantization/
	// gptq_marlin/marlin_template.h), machete (csrc/quantization/machete/).
	{FamilyGEMM, fnContains, "matmul"},
	{FamilyGEMM, fnContains, "fused_moe"},
	{FamilyGEMM, fnContains, "scaled_mm"},
	{FamilyGEMM, fnContains, "wgmma"},
	{FamilyGEMM, nsPrefix, "marlin"},
	{FamilyGEMM, inNS, "machete"},
	// TensorRT-LLM-gen batched GEMMs as FlashInfer runs them for MoE on
	// Blackwell: bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_…_sm100f,
	// bmm_Bfloat16_E2m1E2m1_Fp32_… (flashinfer include/flashinfer/trtllm/
	// batched_gemm/trtllmGen_bmm_export/KernelMetaInfo.h; fixtures: TraceLens
	// b200/eager_trace, 45% of its GPU time), and its dense GEMMs
	// GemmKernel_… / GemmGatedActKernel_… (…/trtllmGen_gemm_export/).
	{FamilyGEMM, fnPrefix, "bmm_"},
	// vLLM's ROCm skinny GEMMs wvSplitK_hf_sml_, wvSplitK_hf_big_,
	// wvSplitKQ_hf_ and LLGemm1_kernel (csrc/rocm/skinny_gemms.cu).
	{FamilyGEMM, fnPrefix, "wvsplitk"},
	// triton_kernels' MoE matmul _matmul_ogs_NNT_bf16xbf16xmxfp4_128x128x128x1
	// (…/matmul_ogs_details/_matmul_ogs.py; fixtures: llm-traces vLLM
	// gpt-oss MI300X) reads as matmul above; its finalize is other.
	// Any other CUTLASS kernel: CUTLASS is a GEMM library (attention kernels
	// built on it matched above).
	{FamilyGEMM, inNS, "cutlass"},
}

// memoryKernels are kernels that are copies: CUPTI's names for copy and set
// activities ("Memcpy HtoD (Pageable -> Device)", "Memset (Device)", as in
// every fixture trace) when a writer files them as kernels, and ROCm's blit
// kernels, which run hipMemcpy/hipMemset on the compute units
// (ROCm/clr rocclr/device/blitcl.cpp: __amd_rocclr_copyBuffer,
// __amd_rocclr_fillBufferAligned, __amd_rocclr_copyImage…).
var memoryKernels = []string{"memcpy", "memset", "__amd_rocclr_copy", "__amd_rocclr_fill"}

// Classify names the family of a GPU event from its category and name
// ("kernel" + "sm90_xmma_gemm_…" → gemm; "gpu_memcpy" → memory; …). It reads
// the kernel's own name, never its arguments; an Itanium-mangled name
// (ROCm writes _ZN7ck_tile6kentry…) is demangled first. CPU events (cpu_op,
// cuda_runtime, …) are other.
func Classify(cat, name string) Family {
	return classify(cat, KernelName(name))
}

// KernelName is a kernel's name as a reader should see it: Itanium-mangled
// names (_Z…, as roctracer leaves them) demangled, others as written.
func KernelName(name string) string {
	if !strings.HasPrefix(name, "_Z") {
		return name
	}
	if s, err := demangle.ToString(name); err == nil {
		return s
	}
	return name
}

// classify is Classify on a demangled name.
func classify(cat, name string) Family {
	c := []byte(cat)
	switch {
	case isCopyCat(c):
		return FamilyMemory
	case !isCat(c, catKernel):
		return FamilyOther
	}
	lower := strings.ToLower(name)
	for _, p := range memoryKernels {
		if strings.HasPrefix(lower, p) {
			return FamilyMemory
		}
	}
	k := parseKernelName(name)
	if f, ok := inductor(k.fn); ok {
		return f
	}
	if k.wrapped != "" {
		if f, ok := match(parseKernelName(k.wrapped)); ok {
			return f
		}
	}
	if f, ok := match(k); ok {
		return f
	}
	return FamilyOther
}

func match(k kernelName) (Family, bool) {
	for _, r := range rules {
		switch r.kind {
		case fnPrefix:
			if strings.HasPrefix(k.fn, r.pat) {
				return r.fam, true
			}
		case fnContains:
			if strings.Contains(k.fn, r.pat) {
				return r.fam, true
			}
		case inNS, nsPrefix:
			for _, ns := range k.ns {
				if ns == r.pat || (r.kind == nsPrefix && strings.HasPrefix(ns, r.pat)) {
					return r.fam, true
				}
			}
		}
	}
	return "", false
}

// inductor classifies the kernels PyTorch Inductor generates
// (torch/_inductor/codegen/triton.py names them triton_<kind>_fused_<ops>_<n>:
// poi pointwise, red and per reductions, tem templates): their fused op list
// names what was fused, so triton_poi_fused_…_all_reduce_… is no collective
// and triton_poi_fused_constant_pad_nd_moe_forward_0 (fixtures: llm-traces
// vLLM gpt-oss) no MoE GEMM. A template with mm in its list (mm, addmm, bmm)
// is Inductor's Triton GEMM.
func inductor(fn string) (Family, bool) {
	for _, kind := range []string{"triton_poi_", "triton_red_", "triton_per_"} {
		if strings.HasPrefix(fn, kind) {
			return FamilyOther, true
		}
	}
	if rest, ok := strings.CutPrefix(fn, "triton_tem_"); ok {
		if strings.Contains(rest, "mm") {
			return FamilyGEMM, true
		}
		return FamilyOther, true
	}
	return "", false
}

// familyLabel is how a summary line names a family.
func familyLabel(f Family) string {
	switch f {
	case FamilyGEMM:
		return "GEMM"
	case FamilyMemory:
		return "memory copies"
	default:
		return string(f)
	}
}
