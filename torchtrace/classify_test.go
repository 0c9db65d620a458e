package torchtrace

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/autocapture/autocapture/internal/testkit/fixtures"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		cat, name string
		want      Family
	}{
		{"kernel", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1", FamilyGEMM},
		{"kernel", "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x3_nn", FamilyGEMM},
		{"kernel", "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<...>>", FamilyGEMM},
		{"kernel", "nvjet_tst_128x64_64x8_1x2_h_bz_coopB_TNN", FamilyGEMM},
		{"kernel", "void cublasLt::splitKreduce_kernel<32, 16, int, float>", FamilyGEMM},
		{"kernel", "fused_moe_kernel", FamilyGEMM},
		{"kernel", "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<...>>>", FamilyAttention},
		{"kernel", "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4>>", FamilyAttention},
		{"kernel", "void vllm::paged_attention_v2_kernel<__nv_bfloat16>", FamilyAttention},
		{"kernel", "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16>", FamilyAttention},
		{"kernel", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", FamilyCommunication},
		{"kernel", "ncclKernel_AllReduce_RING_LL_Sum_half", FamilyCommunication},
		{"kernel", "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 2>", FamilyCommunication},
		{"Kernel", "void vllm::rms_norm_kernel<c10::BFloat16>", FamilyOther},
		{"kernel", "void vllm::act_and_mul_kernel<c10::BFloat16, &silu_kernel>", FamilyOther},
		{"kernel", "triton_poi_fused_add_mul_0", FamilyOther},
		{"gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", FamilyMemory},
		{"gpu_memset", "Memset (Device)", FamilyMemory},
		{"kernel", "Memcpy DtoD (Device -> Device)", FamilyMemory},
		{"cpu_op", "aten::mm", FamilyOther},
		{"cuda_runtime", "cudaLaunchKernel", FamilyOther},
		// ROCm as vLLM runs it: hipBLASLt/rocBLAS Tensile GEMMs, CK GEMMs and
		// attention, vLLM's ROCm paged attention, RCCL, the blit copies.
		{"kernel", "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT128x128x64_MI16x16x1_SN_LDSB1", FamilyGEMM},
		{"kernel", "void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemm_xdl_cshuffle_v3<...>>(...)", FamilyGEMM},
		{"kernel", "void ck_tile::kentry<64, 2, ck_tile::FmhaFwdKernel<...>>(...)", FamilyAttention},
		{"kernel", "void rocblas_gemvn_kernel<64, 16, float, float, float>(...)", FamilyGEMM},
		{"kernel", "void paged_attention_ll4mi_QKV_mfma16_kernel<__hip_bfloat16, ...>(...)", FamilyAttention},
		{"kernel", "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", FamilyCommunication},
		{"kernel", "__amd_rocclr_copyBuffer", FamilyMemory},
		{"kernel", "__amd_rocclr_fillBufferAligned", FamilyMemory},
		// FlashInfer, Triton attention, xformers, MLA, the KV-cache writes.
		{"kernel", "void flashinfer::BatchPrefillWithPagedKVCacheKernel<...>(...)", FamilyAttention},
		{"kernel", "void flashinfer::BatchDecodeWithPagedKVCacheKernel<...>(...)", FamilyAttention},
		{"kernel", "void flashinfer::MergeStatesKernel<8u, 16u, 8u, 4u, __nv_bfloat16, __nv_bfloat16>(...)", FamilyAttention},
		{"kernel", "kernel_unified_attention_2d", FamilyAttention},
		{"kernel", "_fwd_kernel_stage1", FamilyAttention},
		{"kernel", "fmha_cutlassF_f16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<...>::Params)", FamilyAttention},
		{"kernel", "void vllm::concat_and_cache_mla_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>(...)", FamilyAttention},
		{"kernel", "void pytorch_flash::flash_fwd_kernel<...>(...)", FamilyAttention},
		// Not GEMMs, whatever their arguments name: an FBGEMM embedding
		// lookup (fixtures: hta/trace_diff), FlashInfer's sampling.
		{"kernel", "void split_embedding_codegen_forward_unweighted_kernel<float, float, float, long, 2ul>(at::GenericPackedTensorAccessor<fbgemm_gpu::gemm::Tensor>)", FamilyOther},
		{"kernel", "void flashinfer::sampling::TopKTopPSamplingFromProbKernel<...>(...)", FamilyOther},
		// Communication beyond NCCL: FlashInfer's fused all-reduce, PyTorch
		// symmetric memory, DeepEP, MSCCL.
		{"kernel", "void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport<...>(...)", FamilyCommunication},
		{"kernel", "void c10d::symmetric_memory::one_shot_all_reduce_kernel<c10::BFloat16, 8>(...)", FamilyCommunication},
		{"kernel", "void deep_ep::intranode::dispatch<8, 768, 6144>(...)", FamilyCommunication},
		// Memory in every spelling: PyTorch 1.9's categories, CUPTI's names.
		{"Memcpy", "Memcpy HtoD (Pageable -> Device)", FamilyMemory},
		{"Memset", "Memset (Device)", FamilyMemory},
		{"Kernel", "Memset (Device)", FamilyMemory},
		// GEMM names of current CUDA libraries: cuBLAS 12 nvjet, CUTLASS 3,
		// vLLM's scaled_mm and Marlin, Triton's matmul, cuDNN implicit GEMM.
		{"kernel", "void cutlass::device_kernel<vllm::cutlass_3x_gemm<...>::GemmKernel>(...)", FamilyGEMM},
		{"kernel", "void marlin::Marlin<__nv_bfloat16, 4, 256, 1, 8, 8, true, 4, 8, false>(...)", FamilyGEMM},
		{"kernel", "_w8a8_block_fp8_matmul", FamilyGEMM},
		{"kernel", "void implicit_convolve_sgemm<float, float, 1024, 6, 7, 3, 3, 5, 1, false, true, true>(...)", FamilyGEMM},
		// Inference in 2025-2026: TRT-LLM-gen MoE GEMMs on Blackwell, triton_kernels
		// MoE, ROCm skinny GEMMs, Marlin MoE, Inductor templates.
		{"kernel", "bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM_TN_transOut_schedP2x1x2x3_biasM_bN_tma_tmaOpt_clmp_swiGlu_dynBatch_sm100f", FamilyGEMM},
		{"kernel", "_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1_swiglu", FamilyGEMM},
		{"kernel", "void wvSplitK_hf_sml_<__hip_bfloat16, 64, 2, 16, 8, 2, 1>(...)", FamilyGEMM},
		{"kernel", "void marlin_moe_wna16::Marlin<...>(...)", FamilyGEMM},
		{"kernel", "triton_tem_fused_addmm_0", FamilyGEMM},
		{"kernel", "fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvCausalP16VarSeqQ128Kv128PersistentContext", FamilyAttention},
		{"kernel", "void (anonymous namespace)::store_kvcache<2048l, 4, false, long>((anonymous namespace)::StoreKVCacheParams)", FamilyAttention},
		{"kernel", "store_kvcache_kernel", FamilyAttention},
		{"kernel", "attn_fwd", FamilyAttention},
		{"kernel", "reduce_segments", FamilyAttention},
		{"kernel", "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, unsigned long, unsigned int**, unsigned long, unsigned long)", FamilyCommunication},
		// Mangled ROCm names are read demangled: CK tile FMHA behind kentry,
		// an aiter norm.
		{"kernel", "_ZN7ck_tile6kentryILi2ENS_13FmhaFwdKernelIiEEJEEEvDpT1_", FamilyAttention},
		{"kernel", "_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256ELi16ELb1ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_diiiiiiib", FamilyOther},
		// MoE routing and finalize are other, whatever library runs them.
		{"kernel", "void moe::dev::finalize::finalizeKernelVecLoad<moe::dev::finalize::KernelParams<cutlass::bfloat16_t, cutlass::bfloat16_t, 4, true> >(...)", FamilyOther},
		{"kernel", "void moe::dev::routing::routingIndicesHistogramKernel<...>(...)", FamilyOther},
		{"kernel", "_finalize_matmul_scatter_bf16", FamilyOther},
		{"kernel", "void tensorrt_llm::kernels::cutlass_kernels::finalizeMoeRoutingKernel<...>(...)", FamilyOther},
		// False friends: Inductor pointwise kernels naming a collective or MoE,
		// arguments naming flashinfer:: or cutlass::.
		{"kernel", "triton_poi_fused_add_all_reduce_mul_0", FamilyOther},
		{"kernel", "triton_red_fused_moe_forward_sum_1", FamilyOther},
		{"kernel", "triton_poi_fused_constant_pad_nd_moe_forward_0", FamilyOther},
		{"kernel", "void vllm::rms_norm_kernel<c10::BFloat16>(cutlass::bfloat16_t*, flashinfer::Params)", FamilyOther},
	}
	for _, tc := range cases {
		if got := Classify(tc.cat, tc.name); got != tc.want {
			t.Errorf("Classify(%q, %q) = %s, want %s", tc.cat, tc.name, got, tc.want)
		}
	}
}

// TestClassifyRealNames: kernels as they appear in real traces other
// projects wrote (kineto-traces/ under $AUTOCAPTURE_FIXTURES), each found in
// its trace and classified on its own name.
func TestClassifyRealNames(t *testing.T) {
	dir := fixtures.Dir(t, "kineto-traces")
	cases := []struct {
		trace, prefix string
		want          Family
	}{
		{"hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz", "Cijk_Alik_Bljk_SB_Bias", FamilyGEMM},
		{"hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz", "Memcpy HtoD (Host -> Device)", FamilyMemory},
		{"hta/nccl_parser_config/nccl_data.json.gz", "ncclKernel_AllReduce_RING_LL_Sum_float", FamilyCommunication},
		{"hta/nccl_parser_config/nccl_data.json.gz", "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_", FamilyGEMM},
		{"hta/nccl_parser_config/nccl_data.json.gz", "void cublasLt::splitKreduce_kernel<", FamilyGEMM},
		{"hta/nccl_parser_config/nccl_data.json.gz", "sm80_xmma_wgrad_implicit_gemm", FamilyGEMM},
		{"hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz", "ampere_sgemm_32x32_sliced1x4_tn", FamilyGEMM},
		{"hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz", "Memcpy HtoD (Pageable -> Device)", FamilyMemory},
		{"hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz", "cudnn_ampere_scudnn_128x64_relu", FamilyOther},
		{"hta/trace_diff/control/control.json.gz", "void split_embedding_codegen_forward_unweighted_kernel<", FamilyOther},
		{"hta/trace_diff/control/control.json.gz", "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", FamilyCommunication},
		{"hta/trace_diff/control/control.json.gz", "void gemv2T_kernel_val<", FamilyGEMM},
		{"hta/df_index_resolver/df_index_resolver.json.gz", "volta_sgemm_128x64_nn", FamilyGEMM},
		{"hta/df_index_resolver/df_index_resolver.json.gz", "Memcpy DtoD (Device -> Device)", FamilyMemory},
		{"hta/trace_file_list/inference_rank_1.json.gz", "void gemmk1_kernel<", FamilyGEMM},
		{"kineto-tb_plugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz", "Memset (Device)", FamilyMemory},
		{"kineto-tb_plugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz", "void implicit_convolve_sgemm<", FamilyGEMM},
		{"kineto-tb_plugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz", "void cudnn::bn_fw_tr_1C11_kernel_NCHW<", FamilyOther},
	}
	reports := map[string]*Report{}
	for _, c := range cases {
		r := reports[c.trace]
		if r == nil {
			r = analyzeFile(t, filepath.Join(dir, c.trace), Options{Top: 1 << 20})
			reports[c.trace] = r
		}
		found := false
		for _, e := range r.TopKernels {
			if strings.HasPrefix(e.Name, c.prefix) {
				found = true
				if e.Family != c.want {
					t.Errorf("%s: %.80s is %s, want %s", filepath.Base(c.trace), e.Name, e.Family, c.want)
				}
			}
		}
		if !found {
			t.Errorf("%s: no kernel named %s…", filepath.Base(c.trace), c.prefix)
		}
	}
}

// TestKernelName: mangled ROCm names are shown demangled; others as written.
func TestKernelName(t *testing.T) {
	cases := map[string]string{
		"_ZN7ck_tile6kentryILi2ENS_13FmhaFwdKernelIiEEJEEEvDpT1_":                                                 "void ck_tile::kentry<2, ck_tile::FmhaFwdKernel<int> >()",
		"_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256ELi16ELb1ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_diiiiiiib": "void aiter::add_rmsnorm_quant_kernel<std::bfloat16_t, std::bfloat16_t, 256, 16, true, false, true, 1>(std::bfloat16_t*, std::bfloat16_t*, float*, std::bfloat16_t*, std::bfloat16_t*, std::bfloat16_t*, double, int, int, int, int, int, int, int, bool)",
		"_Znot_mangled": "_Znot_mangled",
		"nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT": "nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT",
	}
	for in, want := range cases {
		if got := KernelName(in); got != want {
			t.Errorf("KernelName(%q) = %q, want %q", in, got, want)
		}
	}
}
