package vllmsim

import "time"

// The cost model of one engine iteration (a forward pass over the scheduled
// tokens), built from the parts real decoding time is made of:
//
//   - a fixed CPU overhead (scheduling, input preparation);
//   - the linear layers (GEMM): memory-bound below a few hundred tokens, where
//     reading the weights sets a floor, compute-bound above it;
//   - attention: prefill attention grows with prompt position (quadratic in
//     the prompt), decode attention with the context each sequence reads
//     from the KV cache (memory bandwidth: batch width × context length);
//   - sampling and logits processing, per sequence (sorting a 128k
//     vocabulary for top-p/top-k is not free).
//
// The numbers describe a 7–8B model on one mid-range GPU: ~10k prefill
// tokens/s, a ~30 ms step for a narrow decode batch, ~0.2–0.3 s for 200+
// sequences of a few hundred tokens each.
const (
	costSchedOverhead      = 2500 * time.Microsecond
	costWeightsFloor       = 25 * time.Millisecond
	costGEMMPerToken       = 100 * time.Microsecond
	costDecodeAttnPerToken = 3 * time.Microsecond // per context token read
	costPrefillAttnPerPair = 12 * time.Nanosecond // per (token, earlier token) pair
	costSamplerBase        = 300 * time.Microsecond
	costSamplerPerSeq      = 250 * time.Microsecond
)

// Kernel names as a torch profile of vLLM on an Ampere GPU shows them.
const (
	kernelSchedule    = "Scheduler.schedule"
	kernelGEMM        = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn"
	kernelPrefillAttn = "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>>"
	kernelDecodeAttn  = "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, cutlass::bfloat16_t>>"
	kernelSampler     = "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>"
)

// stepWork is what one iteration computes.
type stepWork struct {
	prefillTokens int     // prompt (or recomputed) tokens this step
	prefillPairs  float64 // attention pairs of those tokens: Σ chunk × (start + chunk/2)
	decodeSeqs    int     // sequences decoding one token
	decodeCtx     int     // context tokens those sequences read
	sampled       int     // sequences sampling a token at the end of the step
}

// kernel is one timed piece of a step, in execution order.
type kernel struct {
	name string
	dur  time.Duration
	cpu  bool // host-side work rather than a GPU kernel
}

// stepCost is the timed breakdown of one iteration.
type stepCost struct {
	kernels []kernel
	total   time.Duration
	gpuSlow float64 // the GPU slowdown it was priced with (0 or 1: none)
}

// costOf prices an iteration; gemmSlowdown (>1) is an injected GEMM
// regression, gpuSlowdown (>1) a slower GPU (a throttled SM clock: max over
// actual; a faulted GPU), which stretches every GPU kernel alike and leaves
// the host-side work as it was.
func costOf(w stepWork, gemmSlowdown, gpuSlowdown float64) stepCost {
	tokens := w.prefillTokens + w.decodeSeqs
	gemm := max(costWeightsFloor, time.Duration(tokens)*costGEMMPerToken)
	if gemmSlowdown > 1 {
		gemm = time.Duration(float64(gemm) * gemmSlowdown)
	}
	ks := []kernel{
		{name: kernelSchedule, dur: costSchedOverhead, cpu: true},
		{name: kernelGEMM, dur: gemm},
	}
	if w.prefillTokens > 0 {
		ks = append(ks, kernel{name: kernelPrefillAttn, dur: time.Duration(w.prefillPairs * float64(costPrefillAttnPerPair))})
	}
	if w.decodeSeqs > 0 {
		ks = append(ks, kernel{name: kernelDecodeAttn, dur: time.Duration(w.decodeCtx) * costDecodeAttnPerToken})
	}
	if w.sampled > 0 {
		ks = append(ks, kernel{name: kernelSampler, dur: costSamplerBase + time.Duration(w.sampled)*costSamplerPerSeq})
	}
	var total time.Duration
	for i, k := range ks {
		if gpuSlowdown > 1 && !k.cpu {
			ks[i].dur = time.Duration(float64(k.dur) * gpuSlowdown)
		}
		total += ks[i].dur
	}
	return stepCost{kernels: ks, total: total, gpuSlow: gpuSlowdown}
}

// flopsOf estimates the floating-point operations of a step for the
// estimated_flops_per_gpu counter: 2 × parameters per token plus attention.
func flopsOf(w stepWork) float64 {
	const params = 8e9
	const attnPerPair = 4 * 4096 * 32 // 4 × hidden × layers
	tokens := float64(w.prefillTokens + w.decodeSeqs)
	return 2*params*tokens + attnPerPair*(w.prefillPairs+float64(w.decodeCtx))
}

// bytesOf estimates the bytes a step reads: the weights once, plus the KV
// cache of every context token attended to.
func bytesOf(w stepWork) (read, written float64) {
	const weightBytes = 16e9
	const kvBytesPerToken = 2 * 2 * 8 * 128 * 32 // K+V × bf16 × kv heads × head dim × layers
	read = weightBytes + kvBytesPerToken*float64(w.decodeCtx)
	written = kvBytesPerToken * float64(w.prefillTokens+w.decodeSeqs)
	return read, written
}
