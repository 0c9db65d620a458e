// Package gen writes synthetic Kineto traces of a vLLM worker for the
// torchtrace tests and benchmarks, and the ground truth of what they hold.
//
// The layout follows Kineto's output_json.cpp: schemaVersion,
// deviceProperties, metadata, displayTimeUnit and baseTimeNanoseconds before
// an indented traceEvents array, distributedInfo and traceName after it; ts
// relative to baseTimeNanoseconds in µs with three decimals. Per engine step
// and layer it writes the python_function frames (with_stack), the cpu_op
// nesting (aten::linear → aten::mm), the cudaLaunchKernel runtime call with
// its correlation id, the ac2g flow pair and the kernel with Kineto's args,
// plus a host-to-device memcpy per step and, with TP > 1, an all-reduce.
package gen

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
)

// Config shapes a trace.
type Config struct {
	Seed   uint64
	Steps  int // engine steps; with MaxBytes 0 the trace's length
	Layers int // decoder layers per step (default 4)
	Device int // the GPU index (pid of GPU events)
	// TP > 1 adds an NCCL all-reduce after attention and after the MLP.
	TP int
	// GEMMScale multiplies GEMM durations (a regression); 0 is 1.
	GEMMScale float64
	// BaseNS is baseTimeNanoseconds.
	BaseNS int64
	// Shuffle writes the events in random order within blocks of this many
	// (0: time order per thread, as Kineto).
	Shuffle int
	// MetadataLast moves baseTimeNanoseconds, deviceProperties and the
	// metadata after traceEvents.
	MetadataLast bool
	// MaxBytes, when > 0, stops adding steps once this many bytes were
	// written to the output (the caller's writer: count compressed bytes
	// by passing a counting writer under the gzip writer as Sink).
	MaxBytes int64
	// Sink, with MaxBytes, is the byte count to compare (default: bytes
	// written by Write).
	Sink func() int64
}

// Truth is what the trace holds, computed while writing it.
type Truth struct {
	Steps    int
	Events   int64
	KernelUS float64            // kernels + memcpy/memset
	FamUS    map[string]float64 // by torchtrace family name
	OpUS     map[string]float64 // by innermost cpu_op
	BusyUS   float64            // union of non-memory kernels on the device
	StartUS  float64            // first GPU activity, trace µs
	EndUS    float64            // last GPU activity end
}

type kspec struct {
	name, fam, op, outer string
	us                   float64 // mean duration
	stream               int
}

var (
	gemmQKV  = kspec{"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas", "gemm", "aten::mm", "aten::linear", 60, 7}
	gemmO    = kspec{"nvjet_tst_128x64_64x8_1x2_h_bz_coopB_TNN", "gemm", "aten::mm", "aten::linear", 40, 7}
	gemmUp   = kspec{"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize256x128x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas", "gemm", "aten::mm", "aten::linear", 180, 7}
	gemmDown = kspec{"void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cutlass::gemm::GemmShape<128, 128, 64>>>", "gemm", "aten::mm", "aten::linear", 95, 7}
	norm     = kspec{"void vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, c10::BFloat16*, c10::BFloat16 const*, float, int, int)", "other", "_C::fused_add_rms_norm", "", 6, 7}
	rotary   = kspec{"void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*, c10::BFloat16*, c10::BFloat16 const*, int, long, long, int, int, int)", "other", "_C::rotary_embedding", "", 4, 7}
	cache    = kspec{"void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>", "attention", "_C_cache_ops::reshape_and_cache_flash", "", 5, 7}
	attn     = kspec{"void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>>>>>>", "attention", "_vllm_fa3_C::fwd", "vllm::unified_attention_with_output", 70, 7}
	act      = kspec{"void vllm::act_and_mul_kernel<c10::BFloat16, &(c10::BFloat16 vllm::silu_kernel<c10::BFloat16>(c10::BFloat16 const&)), false>", "other", "_C::silu_and_mul", "", 9, 7}
	allReduc = kspec{"ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "communication", "vllm::all_reduce", "", 25, 7}
	gather   = kspec{"ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "communication", "vllm::all_gather", "", 10, 20}
	h2d      = kspec{"Memcpy HtoD (Pinned -> Device)", "memory", "aten::copy_", "aten::to", 8, 7}
)

// writer formats events; its byte count drives MaxBytes.
type writer struct {
	w     *bufio.Writer
	n     int64
	buf   []byte
	first bool
	pend  [][]byte // with Shuffle: events waiting to be written
}

func (w *writer) raw(s string) {
	n, _ := w.w.WriteString(s)
	w.n += int64(n)
}

func (w *writer) event(b []byte, shuffle int, rng *rand.Rand) {
	if shuffle <= 0 {
		w.emit(b)
		return
	}
	w.pend = append(w.pend, slices.Clone(b))
	if len(w.pend) >= shuffle {
		w.drain(rng)
	}
}

func (w *writer) drain(rng *rand.Rand) {
	if rng != nil {
		rng.Shuffle(len(w.pend), func(i, j int) { w.pend[i], w.pend[j] = w.pend[j], w.pend[i] })
	}
	for _, b := range w.pend {
		w.emit(b)
	}
	w.pend = w.pend[:0]
}

func (w *writer) emit(b []byte) {
	if !w.first {
		w.raw(",")
	}
	w.first = false
	n, _ := w.w.Write(b)
	w.n += int64(n)
}

// Write writes the trace and returns its truth.
func Write(out io.Writer, c Config) (*Truth, error) {
	if c.Layers <= 0 {
		c.Layers = 4
	}
	if c.GEMMScale <= 0 {
		c.GEMMScale = 1
	}
	if c.TP <= 0 {
		c.TP = 1
	}
	rng := rand.New(rand.NewPCG(c.Seed, 0x5eed))
	w := &writer{w: bufio.NewWriterSize(out, 1<<20), first: true}
	sink := c.Sink
	if sink == nil {
		sink = func() int64 { return w.n }
	}
	meta := fmt.Sprintf(`
  "deviceProperties": [
    {
      "id": %d, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85029158912,
      "computeMajor": 9, "computeMinor": 0,
      "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
      "regsPerBlock": 65536, "warpSize": 32,
      "sharedMemPerBlock": 49152, "numSms": 132
    }
  ],
  "with_stack": 1, "record_shapes": 0, "profile_memory": 0,
  "vllm_version": "0.15.1",
  "displayTimeUnit": "ms",
  "baseTimeNanoseconds": %d,`, c.Device, c.BaseNS)
	w.raw(`{
  "schemaVersion": 1,`)
	if !c.MetadataLast {
		w.raw(meta)
	}
	w.raw("\n  \"traceEvents\": [")
	t := &Truth{FamUS: map[string]float64{}, OpUS: map[string]float64{}, StartUS: -1}
	g := &gen{c: c, rng: rng, w: w, t: t, cpuTS: 1000, ext: 1, corr: 1}
	for step := 0; c.MaxBytes > 0 || step < c.Steps; step++ {
		if c.MaxBytes > 0 && sink() >= c.MaxBytes {
			break
		}
		g.step()
		t.Steps++
	}
	w.drain(rng)
	w.raw(fmt.Sprintf(`,
  {
    "name": "Record Window End", "ph": "i", "s": "g",
    "pid": "", "tid": "", "ts": %.3f
  }
  ],`, g.cpuTS+10))
	t.Events++
	if c.MetadataLast {
		w.raw(meta)
	}
	w.raw(fmt.Sprintf(`
  "distributedInfo": {"backend": "nccl", "rank": %d, "world_size": %d, "pg_count": 1, "nccl_version": "2.27.3"},
  "traceName": "dp0_pp0_tp%d_dcp0_ep0_rank%d.%d.pt.trace.json"
}`, c.Device, c.TP, c.Device, c.Device, c.BaseNS))
	return t, w.w.Flush()
}

type gen struct {
	c     Config
	rng   *rand.Rand
	w     *writer
	t     *Truth
	cpuTS float64 // host thread's clock, µs
	gpuTS float64 // stream 7's clock
	ext   int64
	corr  int64
	pyID  int64
	b     []byte
}

const hostPid, hostTid = 3012, 3012

// step writes one engine step: a memcpy of the inputs, then per layer the
// attention and MLP blocks, then a gap (the scheduler's CPU time).
func (g *gen) step() {
	g.kernel(h2d, 1)
	for range g.c.Layers {
		g.kernel(norm, 1)
		g.kernel(gemmQKV, g.c.GEMMScale)
		g.kernel(rotary, 1)
		g.kernel(cache, 1)
		g.kernel(attn, 1)
		g.kernel(gemmO, g.c.GEMMScale)
		if g.c.TP > 1 {
			g.kernel(allReduc, 1)
		}
		g.kernel(norm, 1)
		g.kernel(gemmUp, g.c.GEMMScale)
		g.kernel(act, 1)
		g.kernel(gemmDown, g.c.GEMMScale)
		if g.c.TP > 1 {
			g.kernel(allReduc, 1)
		}
	}
	gap := 300 + 200*g.rng.Float64() // scheduling between steps: the GPU idles
	g.gpuTS += gap
	g.cpuTS = max(g.cpuTS, g.gpuTS-50)
}

// kernel writes one kernel with its CPU side: python frames, the op(s),
// the launch, the flow pair.
func (g *gen) kernel(k kspec, scale float64) {
	dur := k.us * scale * (0.8 + 0.4*g.rng.Float64())
	dur = float64(int64(dur*1000)) / 1000 // Kineto's 3 decimals
	// CPU side: frames and ops around a 4 µs launch.
	opStart := g.cpuTS
	g.python(opStart-2, 18)
	outerID := int64(0)
	if k.outer != "" {
		outerID = g.ext
		g.ext++
	}
	id := g.ext
	g.ext++
	corr := g.corr
	g.corr++
	launch := opStart + 5
	g.cpuOp(k.op, opStart+1, 10, id)
	if k.outer != "" {
		g.cpuOp(k.outer, opStart, 12, outerID)
	}
	g.runtime(launch, 4, id, corr)
	g.cpuTS = opStart + 14
	// GPU side.
	start := max(g.gpuTS, launch+4+2*g.rng.Float64())
	start = math.Ceil(start*1000) / 1000 // never before the previous kernel's end
	g.flow(launch, start, corr)
	g.gpu(k, start, dur, id, corr, 7)
	g.gpuTS = start + dur
	if k.fam != "memory" {
		g.t.BusyUS += dur
	}
	g.t.OpUS[k.op] += dur
	if g.t.StartUS < 0 {
		g.t.StartUS = start
	}
	g.t.EndUS = max(g.t.EndUS, start+dur)
	// An all-gather overlapping the big GEMM on another stream, wholly
	// inside it: GPU time adds up, the union does not grow.
	if k == gemmUp && g.c.TP > 1 {
		gd := float64(int64(dur*0.4*1000)) / 1000
		gs := float64(int64((start+dur*0.3)*1000)) / 1000
		gid := g.ext
		g.ext++
		g.cpuOp(gather.op, g.cpuTS, 6, gid)
		g.runtime(g.cpuTS+1, 3, gid, g.corr)
		g.gpu(gather, gs, gd, gid, g.corr, gather.stream)
		g.corr++
		g.cpuTS += 8
		g.t.OpUS[gather.op] += gd
	}
}

func (g *gen) gpu(k kspec, ts, dur float64, id, corr int64, stream int) {
	cat := "kernel"
	if k.fam == "memory" {
		cat = "gpu_memcpy"
	}
	b := g.b[:0]
	b = append(b, "\n  {\n    \"ph\": \"X\", \"cat\": \""...)
	b = append(b, cat...)
	b = append(b, "\", \"name\": "...)
	b = strconv.AppendQuote(b, k.name)
	b = append(b, ", \"pid\": "...)
	b = strconv.AppendInt(b, int64(g.c.Device), 10)
	b = append(b, ", \"tid\": "...)
	b = strconv.AppendInt(b, int64(stream), 10)
	b = append(b, ",\n    \"ts\": "...)
	b = strconv.AppendFloat(b, ts, 'f', 3, 64)
	b = append(b, ", \"dur\": "...)
	b = strconv.AppendFloat(b, dur, 'f', 3, 64)
	b = append(b, ",\n    \"args\": {\n      \"External id\": "...)
	b = strconv.AppendInt(b, id, 10)
	if cat == "kernel" {
		b = append(b, ",\n      \"queued\": 0, \"device\": "...)
		b = strconv.AppendInt(b, int64(g.c.Device), 10)
		b = append(b, ", \"context\": 1,\n      \"stream\": "...)
		b = strconv.AppendInt(b, int64(stream), 10)
		b = append(b, ", \"correlation\": "...)
		b = strconv.AppendInt(b, corr, 10)
		b = append(b, ",\n      \"registers per thread\": 168,\n      \"shared memory\": 232448,\n      \"blocks per SM\": "...)
		b = strconv.AppendFloat(b, 0.5+g.rng.Float64(), 'f', 6, 64)
		b = append(b, ",\n      \"warps per SM\": 4.000000,\n      \"grid\": [132, 1, 1],\n      \"block\": [384, 1, 1],\n      \"est. achieved occupancy %\": 6\n    }\n  }"...)
	} else {
		b = append(b, ",\n      \"device\": "...)
		b = strconv.AppendInt(b, int64(g.c.Device), 10)
		b = append(b, ", \"context\": 1,\n      \"stream\": 7, \"correlation\": "...)
		b = strconv.AppendInt(b, corr, 10)
		b = append(b, ",\n      \"bytes\": 65536, \"memory bandwidth (GB/s)\": 8.192\n    }\n  }"...)
	}
	g.b = b
	g.w.event(b, g.c.Shuffle, g.rng)
	g.t.Events++
	g.t.KernelUS += dur
	g.t.FamUS[k.fam] += dur
}

func (g *gen) cpuOp(name string, ts, dur float64, id int64) {
	b := g.b[:0]
	b = append(b, "\n  {\n    \"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": "...)
	b = strconv.AppendQuote(b, name)
	b = append(b, ", \"pid\": 3012, \"tid\": 3012,\n    \"ts\": "...)
	b = strconv.AppendFloat(b, ts, 'f', 3, 64)
	b = append(b, ", \"dur\": "...)
	b = strconv.AppendFloat(b, dur, 'f', 3, 64)
	b = append(b, ",\n    \"args\": {\n      \"External id\": "...)
	b = strconv.AppendInt(b, id, 10)
	b = append(b, ",\"Record function id\": 0, \"Sequence number\": "...)
	b = strconv.AppendInt(b, id/2, 10)
	b = append(b, ", \"Fwd thread id\": 0, \"Ev Idx\": "...)
	b = strconv.AppendInt(b, id, 10)
	b = append(b, "\n    }\n  }"...)
	g.b = b
	g.w.event(b, g.c.Shuffle, g.rng)
	g.t.Events++
}

func (g *gen) runtime(ts, dur float64, id, corr int64) {
	b := g.b[:0]
	b = append(b, "\n  {\n    \"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel\", \"pid\": 3012, \"tid\": 3012,\n    \"ts\": "...)
	b = strconv.AppendFloat(b, ts, 'f', 3, 64)
	b = append(b, ", \"dur\": "...)
	b = strconv.AppendFloat(b, dur, 'f', 3, 64)
	b = append(b, ",\n    \"args\": {\n      \"External id\": "...)
	b = strconv.AppendInt(b, id, 10)
	b = append(b, ",\n      \"cbid\": 211, \"correlation\": "...)
	b = strconv.AppendInt(b, corr, 10)
	b = append(b, "\n    }\n  }"...)
	g.b = b
	g.w.event(b, g.c.Shuffle, g.rng)
	g.t.Events++
}

func (g *gen) flow(from, to float64, corr int64) {
	for i, ph := range []string{"s", "f"} {
		b := g.b[:0]
		b = append(b, "\n  {\n    \"ph\": \""...)
		b = append(b, ph...)
		b = append(b, "\", \"id\": "...)
		b = strconv.AppendInt(b, corr, 10)
		if i == 0 {
			b = append(b, ", \"pid\": 3012, \"tid\": 3012, \"ts\": "...)
			b = strconv.AppendFloat(b, from, 'f', 3, 64)
		} else {
			b = append(b, ", \"pid\": 0, \"tid\": 7, \"ts\": "...)
			b = strconv.AppendFloat(b, to, 'f', 3, 64)
			b = append(b, ", \"bp\": \"e\""...)
		}
		b = append(b, ",\n    \"cat\": \"ac2g\", \"name\": \"ac2g\"\n  }"...)
		g.b = b
		g.w.event(b, g.c.Shuffle, g.rng)
		g.t.Events++
	}
}

var frames = []string{
	"vllm/v1/worker/gpu_model_runner.py(2210): execute_model",
	"vllm/model_executor/models/llama.py(342): forward",
	"torch/nn/modules/module.py(1784): _call_impl",
	"vllm/model_executor/layers/linear.py(561): forward",
	"vllm/model_executor/layers/quantization/utils/w8a8_utils.py(312): apply",
}

// python writes with_stack frames around an op: the bulk of a real file.
func (g *gen) python(ts, dur float64) {
	for i, f := range frames {
		g.pyID++
		b := g.b[:0]
		b = append(b, "\n  {\n    \"ph\": \"X\", \"cat\": \"python_function\", \"name\": "...)
		b = strconv.AppendQuote(b, f)
		b = append(b, ", \"pid\": 3012, \"tid\": 3012,\n    \"ts\": "...)
		b = strconv.AppendFloat(b, ts+float64(i)*0.1, 'f', 3, 64)
		b = append(b, ", \"dur\": "...)
		b = strconv.AppendFloat(b, dur-float64(i)*0.2, 'f', 3, 64)
		b = append(b, ",\n    \"args\": {\n      \"Python parent id\": "...)
		b = strconv.AppendInt(b, g.pyID-1, 10)
		b = append(b, ", \"Python id\": "...)
		b = strconv.AppendInt(b, g.pyID, 10)
		b = append(b, ", \"Python thread\": 0\n    }\n  }"...)
		g.b = b
		g.w.event(b, g.c.Shuffle, g.rng)
		g.t.Events++
	}
}
