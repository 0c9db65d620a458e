package vllmsim

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

const (
	gpuPid  = 0 // torch puts device activity under the device index
	hostTid = 1
)

// writeProfile writes one trace per worker rank, the front end's trace and a
// summary table per rank into opts.ProfilerDir, with vLLM's file names, and
// returns the paths written.
func writeProfile(opts Options, begun, ended time.Time, steps []profiledStep, reqs []FinishedRequest) ([]string, CaptureTruth, error) {
	dir := opts.ProfilerDir
	var truth CaptureTruth
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, truth, fmt.Errorf("profiler dir: %w", err)
	}
	stamp := ended.UnixMilli()
	var files []string
	var errs []error
	for rank := range opts.TensorParallel {
		name := fmt.Sprintf("dp0_pp0_tp%d_dcp0_ep0_rank%d.%d.pt.trace.json.gz", rank, rank, stamp)
		table, written, err := rankTrace(filepath.Join(dir, name), opts, rank, begun, ended, steps, vllmRank(opts, rank))
		truth.add(written)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		files = append(files, filepath.Join(dir, name))
		tpath := filepath.Join(dir, fmt.Sprintf("profiler_out_%d.txt", rank))
		if err := os.WriteFile(tpath, []byte(table), 0o644); err != nil {
			errs = append(errs, err)
		} else {
			files = append(files, tpath)
		}
	}
	host, _ := os.Hostname()
	name := fmt.Sprintf("%s_%d.async_llm.%d.pt.trace.json.gz", host, os.Getpid(), stamp)
	if err := frontEndTrace(filepath.Join(dir, name), begun, ended, steps, reqs); err != nil {
		errs = append(errs, err)
	} else {
		files = append(files, filepath.Join(dir, name))
	}
	return files, truth, errors.Join(errs...)
}

// rankFlavor is what differs between the engines' rank traces: the host
// process's name, the metadata keys of the header and the trace's name.
type rankFlavor struct {
	process   string // "VllmWorker rank=0", "TP0"
	meta      string // header keys after profile_memory, each ending in a comma
	traceName string
	stack     int // with_stack as Kineto writes it (0 or 1)
	shapes    int // record_shapes
}

// vllmRank is a vLLM worker's: vllm_version in the header, with_stack and
// record_shapes as the simulated --profiler-config leaves them.
func vllmRank(opts Options, rank int) rankFlavor {
	return rankFlavor{process: fmt.Sprintf("VllmWorker rank=%d", rank), meta: fmt.Sprintf("\n  \"vllm_version\": %q,", opts.Version),
		traceName: fmt.Sprintf("dp0_pp0_tp%d_dcp0_ep0_rank%d", rank, rank)}
}

// rankTrace writes a worker's trace and returns its key_averages table. Per
// iteration: an execute_model annotation and the scheduler's frame on the
// host thread; per kernel (see stepKernels) the cpu_op that launches it
// (inside aten::linear for the GEMMs), the cuda_runtime launch carrying the
// correlation id, the ac2g flow pair, and the kernel on its stream with
// Kineto's args ("External id" naming the op, "correlation" the launch).
// The sampled tokens are copied back on a second stream. The iteration
// running when the recording starts and the one running at its end keep
// only their events inside it (traceWriter.within).
func rankTrace(path string, opts Options, rank int, begun, ended time.Time, steps []profiledStep, fl rankFlavor) (string, CaptureTruth, error) {
	hostPid := 1000 + rank
	head := fmt.Sprintf(`"schemaVersion": 1,
  "deviceProperties": [
    %s
  ],
  "with_stack": %d, "record_shapes": %d, "profile_memory": 0,%s`, deviceProperties(opts.ProfilerGPU, rank), fl.stack, fl.shapes, fl.meta)
	tw, err := createTrace(path, begun, ended, head)
	if err != nil {
		return "", CaptureTruth{}, err
	}
	tw.meta("process_name", hostPid, 0, as("name", fl.process))
	tw.meta("thread_name", hostPid, hostTid, as("name", "python"))
	tw.meta("process_name", gpuPid+rank, 0, as("name", fmt.Sprintf("GPU %d", rank)))
	tw.meta("process_labels", gpuPid+rank, 0, as("labels", fmt.Sprintf("GPU %d", rank)))
	tw.meta("thread_name", gpuPid+rank, computeStream, as("name", fmt.Sprintf("stream %d", computeStream)))
	tw.meta("thread_name", gpuPid+rank, copyStream, as("name", fmt.Sprintf("stream %d", copyStream)))
	ids := &traceIDs{ext: 1, corr: 1}
	for i, ps := range steps {
		writeStep(tw, opts, rank, hostPid, i, ps, ids)
	}
	tail := fmt.Sprintf(`"distributedInfo": {"backend": "nccl", "rank": %d, "world_size": %d, "pg_count": 1, "nccl_version": "2.21.5"}`,
		rank, opts.TensorParallel)
	table := kernelTable(tw.table, tw.order)
	return table, tw.written, tw.close(tail, fl.traceName)
}

// traceIDs are a file's External id and correlation counters.
type traceIDs struct{ ext, corr int64 }

const usec = float64(time.Microsecond)

func at(t time.Time, us float64) time.Time { return t.Add(time.Duration(us * usec)) }

// writeGPU writes a kernel or a copy with Kineto's args, when it lies
// inside the recording, and says whether it did.
func writeGPU(tw *traceWriter, k kspec, rank int, start time.Time, us float64, ext, corr int64, w stepWork) bool {
	// Kineto writes an External id only for a kernel whose launching op is
	// in the trace: not for graph-replayed or pre-recording ones.
	args := make([]kv, 0, 14)
	if ext != 0 {
		args = append(args, ai("External id", ext))
	}
	var ok bool
	if k.category() == "gpu_memcpy" {
		bytes := int64(8 * (w.prefillTokens + w.decodeSeqs + 1))
		args = append(args, ai("device", int64(rank)), ai("context", 1), ai("stream", int64(k.onStream())),
			ai("correlation", corr), ai("bytes", bytes), af("memory bandwidth (GB/s)", float64(bytes)/1e3/max(us, 0.001)))
		ok = tw.x("gpu_memcpy", k.name, gpuPid+rank, k.onStream(), start, us, args...)
	} else {
		args = append(args, ai("queued", 0), ai("device", int64(rank)), ai("context", 1),
			ai("stream", int64(k.onStream())), ai("correlation", corr), ai("registers per thread", 128),
			ai("shared memory", 49152), af("blocks per SM", 1.6), af("warps per SM", 12.8),
			as("grid", "[128, 1, 1]"), as("block", "[256, 1, 1]"), ai("est. achieved occupancy %", 25))
		ok = tw.x("kernel", k.name, gpuPid+rank, k.onStream(), start, us, args...)
	}
	if ok {
		tw.written.GPUus += max(us, 0)
		tw.written.Kernels++
		if k.gemm {
			tw.written.GEMMus += max(us, 0)
		}
	}
	return ok
}

// frontEndTrace writes the API server's trace: the output handler after each
// iteration and one generate span per request that finished while
// recording, each request on the first free lane so that events on a thread
// never overlap.
func frontEndTrace(path string, begun, ended time.Time, steps []profiledStep, reqs []FinishedRequest) error {
	const pid = 1
	tw, err := createTrace(path, begun, ended, `"schemaVersion": 1,`)
	if err != nil {
		return err
	}
	tw.meta("process_name", pid, 0, as("name", "AsyncLLM"))
	tw.meta("thread_name", pid, hostTid, as("name", "output_handler"))
	for _, ps := range steps {
		end := ps.start.Add(ps.rec.end - ps.rec.start)
		tw.x("python_function", "AsyncLLM.output_handler", pid, hostTid, end, 150)
	}
	var lanes []time.Time
	for _, f := range reqs {
		lane := -1
		for i, busyUntil := range lanes {
			if !busyUntil.After(f.Arrival) {
				lane = i
				break
			}
		}
		if lane < 0 {
			lane = len(lanes)
			lanes = append(lanes, time.Time{})
			tw.meta("thread_name", pid, 100+lane, as("name", fmt.Sprintf("request lane %d", lane)))
		}
		lanes[lane] = f.Finished
		tw.x("python_function", "AsyncLLM.generate", pid, 100+lane, f.Arrival,
			float64(f.Finished.Sub(f.Arrival).Nanoseconds())/1e3,
			as("request_id", f.ID), as("trace_id", f.TraceID), as("finished_reason", f.Outcome))
	}
	return tw.close("", "async_llm")
}

// kernelTable is the profiler_out_<rank>.txt summary, in the layout of
// torch's key_averages().table(sort_by="self_cuda_time_total").
func kernelTable(rows map[string]*tableRow, names []string) string {
	order := slices.Clone(names)
	var totalCPU, totalCUDA float64
	for _, r := range rows {
		totalCPU += r.cpu
		totalCUDA += r.cuda
	}
	sort.SliceStable(order, func(i, j int) bool { return rows[order[i]].cuda > rows[order[j]].cuda })
	sep := strings.Repeat("-", 55) + strings.Repeat("  "+strings.Repeat("-", 12), 5) + "  \n"
	var b strings.Builder
	b.WriteString(sep)
	fmt.Fprintf(&b, "%55s  %12s  %12s  %12s  %12s  %12s  \n", "Name", "Self CPU", "Self CUDA", "Self CUDA %", "CUDA time avg", "# of Calls")
	b.WriteString(sep)
	for _, n := range order {
		r := rows[n]
		name := n
		if len(name) > 55 {
			name = name[:52] + "..."
		}
		pct := 0.0
		if totalCUDA > 0 {
			pct = 100 * r.cuda / totalCUDA
		}
		fmt.Fprintf(&b, "%55s  %12s  %12s  %11.2f%%  %12s  %12d  \n", name, fmtMicros(r.cpu), fmtMicros(r.cuda),
			pct, fmtMicros(r.cuda/float64(r.calls)), r.calls)
	}
	b.WriteString(sep)
	fmt.Fprintf(&b, "Self CPU time total: %s\nSelf CUDA time total: %s\n", fmtMicros(totalCPU), fmtMicros(totalCUDA))
	return b.String()
}

// fmtMicros formats microseconds as torch does: us, ms or s.
func fmtMicros(us float64) string {
	switch {
	case us >= 1e6:
		return fmt.Sprintf("%.3fs", us/1e6)
	case us >= 1e3:
		return fmt.Sprintf("%.3fms", us/1e3)
	default:
		return fmt.Sprintf("%.3fus", us)
	}
}
