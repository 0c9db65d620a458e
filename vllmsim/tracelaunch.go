package vllmsim

// How a step's kernels reach the GPU in a rank's trace: one launch per
// kernel under the op that calls it, or, for a step of decodes alone with
// CUDA graphs on, one cudaGraphLaunch replaying the decoder layers.

// cudaGraphLaunchCBID is CUPTI's CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000.
const cudaGraphLaunchCBID = 311

// stepClock is where a step's host thread and compute stream are, in µs
// since the step's start.
type stepClock struct{ cpu, gpu float64 }

// writeStep writes one iteration on one rank.
func writeStep(tw *traceWriter, opts Options, rank, hostPid, i int, ps profiledStep, ids *traceIDs) {
	st := ps.rec
	total := float64((st.end - st.start).Nanoseconds()) / 1e3
	tw.x("user_annotation", "execute_model", hostPid, hostTid, ps.start, total,
		ai("External id", ids.ext), ai("step", int64(i)), ai("num_running", int64(st.running)),
		ai("num_waiting", int64(st.waiting)), ai("prefill_tokens", int64(st.work.prefillTokens)),
		ai("decode_seqs", int64(st.work.decodeSeqs)))
	ids.ext++
	sched, work := stepKernels(st.cost, st.work, opts.ProfilerLayers, opts.TensorParallel, gpuKernels(opts.ProfilerGPU))
	tw.x("python_function", "vllm/v1/core/sched/scheduler.py(213): schedule", hostPid, hostTid, ps.start, sched)
	sc := stepLaunch{tw: tw, rank: rank, hostPid: hostPid, ps: ps, ids: ids, clk: stepClock{sched, sched}}
	// vLLM V1 captures full graphs for batches of decodes only (a prefill
	// runs eagerly here); inputs, the LM head and the sampler stay outside.
	graphed := !opts.EnforceEager && st.work.prefillTokens == 0 && st.work.decodeSeqs > 0
	for j := 0; j < len(work); {
		if !graphed || work[j].k.eager {
			sc.launch(work[j])
			j++
			continue
		}
		end := j
		for end < len(work) && !work[end].k.eager {
			end++
		}
		sc.graph(work[j:end])
		j = end
	}
	sc.launch(gpuWork{kTokD2H, 2 + 0.01*float64(st.work.sampled)})
}

// stepLaunch writes one step's launches and kernels.
type stepLaunch struct {
	tw            *traceWriter
	rank, hostPid int
	ps            profiledStep
	ids           *traceIDs
	clk           stepClock
}

// launch writes one kernel (or copy) with the op that launches it, the
// runtime or driver call carrying its correlation, the ac2g flow pair and
// the kernel. CUPTI is on from the profiler's prepare, a little before the
// window opens: a kernel launched then but running inside the recording is
// written with its correlation and flow end but no launch row nor External
// id (Kineto drops the host rows outside the window), as the first kernels
// of the HF H100 trace show.
func (sc *stepLaunch) launch(g gpuWork) {
	tw, k, start := sc.tw, g.k, sc.ps.start
	op := sc.ids.ext
	sc.ids.ext++
	if k.outer != "" {
		outer := sc.ids.ext
		sc.ids.ext++
		tw.x("cpu_op", k.outer, sc.hostPid, hostTid, at(start, sc.clk.cpu), 5, ai("External id", outer))
	}
	tw.x("cpu_op", k.op, sc.hostPid, hostTid, at(start, sc.clk.cpu+0.5), 4, ai("External id", op))
	launch := sc.clk.cpu + 1.5
	corr := sc.ids.corr
	sc.ids.corr++
	cat, cbid := k.launchCat()
	launched := tw.x(cat, k.launchCall(), sc.hostPid, hostTid, at(start, launch), 2.5,
		ai("External id", op), ai("cbid", cbid), ai("correlation", corr))
	sc.clk.cpu += 6
	gpu := sc.clk.gpu
	if k.onStream() == computeStream {
		gpu = max(gpu, launch+4.5)
	}
	ext := op
	if !launched {
		ext = 0
	}
	switch {
	case !sc.kernel(k, gpu, g.us, ext, corr):
	case launched:
		tw.flow("s", corr, sc.hostPid, hostTid, at(start, launch))
	default:
		tw.written.PreFrame++
	}
	if k.onStream() == computeStream {
		sc.clk.gpu = gpu + g.us
	}
}

// graph writes one cudaGraphLaunch and the kernels it replays, back to back
// on the compute stream, each carrying the launch's correlation and no
// External id (no op launched it), as the graph-replayed kernels of the
// vLLM MI300X piecewise trace do.
func (sc *stepLaunch) graph(work []gpuWork) {
	tw, start := sc.tw, sc.ps.start
	launch := sc.clk.cpu + 0.5
	corr := sc.ids.corr
	sc.ids.corr++
	launched := tw.x("cuda_runtime", "cudaGraphLaunch", sc.hostPid, hostTid, at(start, launch), 8,
		ai("cbid", cudaGraphLaunchCBID), ai("correlation", corr))
	sc.clk.cpu += 12
	gpu := max(sc.clk.gpu, launch+4.5)
	any := false
	for _, g := range work {
		if sc.kernel(g.k, gpu, g.us, 0, corr) {
			any = true
			if launched {
				tw.written.Graphed++
			} else {
				tw.written.PreFrame++
			}
		}
		gpu += g.us
	}
	sc.clk.gpu = gpu
	if any && launched {
		tw.flow("s", corr, sc.hostPid, hostTid, at(start, launch))
	}
}

// kernel writes one GPU row and its flow end when it lies inside the
// recording; ext 0 writes no External id.
func (sc *stepLaunch) kernel(k kspec, gpu, us float64, ext, corr int64) bool {
	ts := at(sc.ps.start, gpu)
	if !writeGPU(sc.tw, k, sc.rank, ts, us, ext, corr, sc.ps.rec.work) {
		return false
	}
	sc.tw.flow("f", corr, gpuPid+sc.rank, k.onStream(), ts)
	return true
}
