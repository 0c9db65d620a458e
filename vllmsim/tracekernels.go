package vllmsim

// What one engine iteration looks like on a worker's GPU: the cost model's
// GEMM, attention and sampler time spread over the decoder layers as the
// kernels vLLM launches for a Llama-style model on an Ampere GPU, each under
// the CPU operators that launch it.

// kspec is one kernel kind: its name, the cpu_op that launches it (and the
// op around that one, if any), the launch call and the stream. gemm marks
// the cost model's GEMM time (the projections and the LM head): the truth a
// capture's GEMM share is held to. eager marks the work vLLM runs outside
// its CUDA graphs (input copies, the LM head and the sampler).
type kspec struct {
	name, op, outer string
	cat             string // kernel, gpu_memcpy
	launch          string // cuda_runtime call, or cuda_driver when driver
	driver          bool
	stream          int
	gemm, eager     bool
}

// Streams: the compute stream and the one vLLM copies sampled tokens back on.
const (
	computeStream = 7
	copyStream    = 20
)

var (
	kQKV     = kspec{name: "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x3_tn", op: "aten::mm", outer: "aten::linear", gemm: true}
	kOProj   = kspec{name: "ampere_bf16_s16816gemm_bf16_64x64_ldg8_f2f_stages_64x5_tn", op: "aten::mm", outer: "aten::linear", gemm: true}
	kUp      = kspec{name: kernelGEMM, op: "aten::mm", outer: "aten::linear", gemm: true}
	kDown    = kspec{name: kernelGEMM, op: "aten::mm", outer: "aten::linear", gemm: true}
	kLMHead  = kspec{name: "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8::Params)", op: "aten::mm", outer: "aten::linear", gemm: true, eager: true}
	kNorm    = kspec{name: "void vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, c10::BFloat16*, c10::BFloat16 const*, float, int, int)", op: "_C::fused_add_rms_norm"}
	kRotary  = kspec{name: "void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*, c10::BFloat16*, c10::BFloat16 const*, int, long, long, int, int, int)", op: "_C::rotary_embedding"}
	kCache   = kspec{name: "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>(__nv_bfloat16 const*, __nv_bfloat16 const*, __nv_bfloat16*, __nv_bfloat16*, long const*, long, long, long, long, int, int, int, float const*, float const*)", op: "_C_cache_ops::reshape_and_cache_flash"}
	kPrefill = kspec{name: kernelPrefillAttn, op: "_vllm_fa2_C::varlen_fwd", outer: "vllm::unified_attention_with_output"}
	kDecode  = kspec{name: kernelDecodeAttn, op: "_vllm_fa2_C::varlen_fwd", outer: "vllm::unified_attention_with_output"}
	// torch.compile (vLLM V1's default) turns SiluAndMul into an Inductor
	// Triton kernel; Inductor's launcher names the op after the kernel
	// (_RecordFunctionFast) and Triton's launcher calls the driver API
	// (cuLaunchKernel for a one-CTA-cluster launch, as the HF H100 trace's
	// cuda_driver rows show).
	kAct      = kspec{name: "triton_poi_fused_mul_silu_slice_0", op: "triton_poi_fused_mul_silu_slice_0", launch: "cuLaunchKernel", driver: true}
	kAllRed   = kspec{name: "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", op: "vllm::all_reduce"}
	kSoftmax  = kspec{name: kernelSampler, op: "aten::_softmax", outer: "aten::softmax", eager: true}
	kTopK     = kspec{name: "void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>(at::cuda::detail::TensorInfo<float, unsigned int>, unsigned int, unsigned int, bool, unsigned int, unsigned int, at::cuda::detail::TensorInfo<float, unsigned int>, unsigned int, at::cuda::detail::TensorInfo<long, unsigned int>, unsigned int, float*)", op: "aten::topk", eager: true}
	kInputH2D = kspec{name: "Memcpy HtoD (Pinned -> Device)", op: "aten::copy_", outer: "aten::to", cat: "gpu_memcpy", launch: "cudaMemcpyAsync", eager: true}
	kTokD2H   = kspec{name: "Memcpy DtoH (Device -> Pinned)", op: "aten::copy_", outer: "aten::to", cat: "gpu_memcpy", launch: "cudaMemcpyAsync", stream: copyStream, eager: true}
)

func (k kspec) category() string {
	if k.cat == "" {
		return "kernel"
	}
	return k.cat
}

func (k kspec) launchCall() string {
	if k.launch == "" {
		return "cudaLaunchKernel"
	}
	return k.launch
}

// launchCat is the launch row's category and cbid: CUPTI's callback ids
// (cupti_runtime_cbid.h, cupti_driver_cbid.h) as Kineto writes them.
func (k kspec) launchCat() (string, int64) {
	switch {
	case k.driver:
		return "cuda_driver", 307 // cuLaunchKernel
	case k.launchCall() == "cudaMemcpyAsync":
		return "cuda_runtime", 41
	default:
		return "cuda_runtime", 211 // cudaLaunchKernel_v7000
	}
}

func (k kspec) onStream() int {
	if k.stream == 0 {
		return computeStream
	}
	return k.stream
}

// gpuWork is one kernel of a step with its duration in µs.
type gpuWork struct {
	k  kspec
	us float64
}

// The shares of a layer's GEMM time per projection (Llama-3-8B weights:
// qkv 6144×4096, o 4096×4096, gate_up 28672×4096, down 4096×14336), and of
// the step's GEMM time spent in the LM head.
const (
	shareQKV, shareO, shareUp, shareDown = 0.11, 0.08, 0.54, 0.27
	shareLMHead                          = 0.06
	modelLayers                          = 32 // Llama-3-8B
)

// stepKernels spreads a step's cost over its kernels. The GEMM, attention
// and sampler totals are the cost model's; the small kernels (norms,
// rotary embedding, cache writes, activation, the input copy and, with
// TP > 1, two all-reduces per layer) are priced per token and carved out of
// the GEMM time, so that the step lasts what the cost model says.
func stepKernels(c stepCost, w stepWork, layers, tp int, ks kernelSet) (sched float64, out []gpuWork) {
	var gemm, prefill, decode, sampler float64
	for _, k := range c.kernels {
		us := float64(k.dur.Nanoseconds()) / 1e3
		switch {
		case k.cpu:
			sched += us
		case k.name == kernelGEMM:
			gemm += us
		case k.name == kernelPrefillAttn:
			prefill += us
		case k.name == kernelDecodeAttn:
			decode += us
		case k.name == kernelSampler:
			sampler += us
		}
	}
	tok := float64(w.prefillTokens + w.decodeSeqs)
	// Priced per layer of the model; fewer layers shown each carry more,
	// so the mix does not depend on how many are written.
	per := float64(modelLayers) / float64(layers)
	// A slower GPU (a throttled clock) stretches them as it does the cost
	// model's kernels; the all-reduce is link-bound and does not slow.
	gpu := max(c.gpuSlow, 1)
	norm, rotary, cache := gpu*per*(2+0.004*tok), gpu*per*(1.5+0.002*tok), gpu*per*(1.5+0.003*tok)
	act, allred := gpu*per*(2+0.006*tok), 0.0
	if tp > 1 {
		// A ring all-reduce of the hidden states (tokens × 4096 × bf16)
		// over PCIe: ~15 µs of latency plus ~0.8 µs per token.
		allred = per * (15 + 0.8*tok)
	}
	input := gpu * (3 + 0.002*tok)
	small := float64(layers)*(2*norm+rotary+cache+act+2*allred) + input + norm
	// The small kernels never take more than a third of the GEMM time.
	scale := 1.0
	if small > gemm/3 {
		scale = gemm / 3 / small
	}
	gemm -= small * scale
	norm, rotary, cache, act, allred, input = norm*scale, rotary*scale, cache*scale, act*scale, allred*scale, input*scale

	L := float64(layers)
	perLayer := gemm * (1 - shareLMHead) / L
	out = append(out, gpuWork{kInputH2D, input})
	for range layers {
		out = append(out, gpuWork{kNorm, norm}, gpuWork{ks.qkv, perLayer * shareQKV}, gpuWork{kRotary, rotary},
			gpuWork{kCache, cache})
		if prefill > 0 {
			out = append(out, gpuWork{ks.prefill, prefill / L})
		}
		if decode > 0 {
			out = append(out, gpuWork{ks.decode, decode / L})
		}
		out = append(out, gpuWork{ks.o, perLayer * shareO})
		if tp > 1 {
			out = append(out, gpuWork{kAllRed, allred})
		}
		out = append(out, gpuWork{kNorm, norm}, gpuWork{ks.up, perLayer * shareUp}, gpuWork{kAct, act},
			gpuWork{ks.down, perLayer * shareDown})
		if tp > 1 {
			out = append(out, gpuWork{kAllRed, allred})
		}
	}
	out = append(out, gpuWork{kNorm, norm}, gpuWork{ks.lmHead, gemm * shareLMHead})
	if sampler > 0 {
		out = append(out, gpuWork{kSoftmax, sampler * 0.7}, gpuWork{kTopK, sampler * 0.3})
	}
	return sched, out
}
