package torchtrace

import "strings"

// GPU event categories as Kineto names them (ActivityType.cpp); matched
// without regard to case, as older writers spelled "Kernel" and "Memcpy".
const (
	catKernel = "kernel"
	catMemcpy = "gpu_memcpy"
	catMemset = "gpu_memset"
	catCPUOp  = "cpu_op"
)

// Patterns per family, matched against the lower-cased kernel name in this
// order: the first family with a matching pattern wins. Order matters:
// FlashAttention 3 runs as cutlass::device_kernel<flash::…> (attention before
// the cutlass GEMMs), and vLLM's custom all-reduce is not a GEMM whatever its
// template arguments say.
//
// Decisions:
//   - reshape_and_cache (vLLM writing K and V into the paged cache) is
//     attention: it runs inside the attention layer, once per layer, and its
//     time grows with the tokens attended, so an attention regression shows
//     there too.
//   - Triton and cutlass matmuls (fused_moe_kernel, *_matmul*, nvjet_* of
//     cuBLAS on Hopper, cublasLt split-K reductions) are GEMM.
//   - vLLM's fused elementwise kernels (rms_norm, act_and_mul, rotary
//     embedding), softmax and sampling kernels are other.
var familyPatterns = []struct {
	fam  Family
	pats []string
}{
	{FamilyCommunication, []string{"nccl", "cross_device_reduce", "all_reduce", "allreduce", "all_gather",
		"allgather", "reduce_scatter", "reducescatter", "alltoall", "all_to_all"}},
	{FamilyAttention, []string{"flash", "fmha", "attention", "attn", "reshape_and_cache", "flashinfer",
		"mla_", "xformers"}},
	{FamilyGEMM, []string{"gemm", "xmma", "cutlass", "cublas", "nvjet", "matmul", "fused_moe", "wgmma",
		"_mm_", "gemv"}},
}

// Classify names the family of a GPU event from its category and name
// ("kernel" + "sm90_xmma_gemm_…" → gemm; "gpu_memcpy" → memory; …). CPU
// events (cpu_op, cuda_runtime, …) are other.
func Classify(cat, name string) Family {
	switch {
	case strings.EqualFold(cat, catMemcpy), strings.EqualFold(cat, catMemset):
		return FamilyMemory
	case !strings.EqualFold(cat, catKernel):
		return FamilyOther
	}
	lower := strings.ToLower(name)
	if strings.HasPrefix(lower, "memcpy") || strings.HasPrefix(lower, "memset") {
		return FamilyMemory
	}
	for _, fp := range familyPatterns {
		for _, p := range fp.pats {
			if strings.Contains(lower, p) {
				return fp.fam
			}
		}
	}
	return FamilyOther
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
