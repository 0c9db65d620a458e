package torchtrace

import "testing"

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
	}
	for _, tc := range cases {
		if got := Classify(tc.cat, tc.name); got != tc.want {
			t.Errorf("Classify(%q, %q) = %s, want %s", tc.cat, tc.name, got, tc.want)
		}
	}
}
