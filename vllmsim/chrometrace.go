package vllmsim

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// traceEvent is one Chrome trace event, as torch.profiler writes them.
type traceEvent struct {
	Ph   string         `json:"ph"`
	Cat  string         `json:"cat,omitempty"`
	Name string         `json:"name"`
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	Ts   float64        `json:"ts"`            // microseconds
	Dur  *float64       `json:"dur,omitempty"` // microseconds, for "X" events
	Args map[string]any `json:"args,omitempty"`
}

// chromeTrace is the file: torch's top-level keys plus the events.
type chromeTrace struct {
	SchemaVersion    int              `json:"schemaVersion"`
	DeviceProperties []map[string]any `json:"deviceProperties,omitempty"`
	DistributedInfo  map[string]any   `json:"distributedInfo,omitempty"`
	TraceEvents      []traceEvent     `json:"traceEvents"`
	TraceName        string           `json:"traceName"`
	DisplayTimeUnit  string           `json:"displayTimeUnit"`
	BaseTimeNanos    int64            `json:"baseTimeNanoseconds"`
}

const (
	gpuPid    = 0 // torch puts device activity under the device index
	streamTid = 7 // the default compute stream
	hostTid   = 1
)

func micros(t time.Time) float64 { return float64(t.UnixNano()) / 1e3 }

func xEvent(cat, name string, pid, tid int, start time.Time, dur time.Duration, args map[string]any) traceEvent {
	d := float64(dur.Nanoseconds()) / 1e3
	return traceEvent{Ph: "X", Cat: cat, Name: name, Pid: pid, Tid: tid, Ts: micros(start), Dur: &d, Args: args}
}

func metaEvent(name string, pid, tid int, value string) traceEvent {
	return traceEvent{Ph: "M", Name: name, Pid: pid, Tid: tid, Args: map[string]any{"name": value}}
}

// writeProfile writes one trace per worker rank, the front end's trace and a
// summary table per rank into opts.ProfilerDir, with vLLM's file names, and
// returns the paths written.
func writeProfile(opts Options, begun, ended time.Time, steps []profiledStep, reqs []FinishedRequest) ([]string, error) {
	dir := opts.ProfilerDir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("profiler dir: %w", err)
	}
	stamp := ended.UnixMilli()
	var files []string
	var errs []error
	for rank := range opts.TensorParallel {
		name := fmt.Sprintf("dp0_pp0_tp%d_dcp0_ep0_rank%d.%d.pt.trace.json.gz", rank, rank, stamp)
		tr := rankTrace(opts, rank, begun, steps)
		if err := writeGzipJSON(filepath.Join(dir, name), tr); err != nil {
			errs = append(errs, err)
		} else {
			files = append(files, filepath.Join(dir, name))
		}
		table := filepath.Join(dir, fmt.Sprintf("profiler_out_%d.txt", rank))
		if err := os.WriteFile(table, []byte(kernelTable(tr.TraceEvents)), 0o644); err != nil {
			errs = append(errs, err)
		} else {
			files = append(files, table)
		}
	}
	host, _ := os.Hostname()
	name := fmt.Sprintf("%s_%d.async_llm.%d.pt.trace.json.gz", host, os.Getpid(), stamp)
	if err := writeGzipJSON(filepath.Join(dir, name), frontEndTrace(opts, begun, steps, reqs)); err != nil {
		errs = append(errs, err)
	} else {
		files = append(files, filepath.Join(dir, name))
	}
	return files, errors.Join(errs...)
}

// rankTrace is a worker's trace: per iteration an execute_model annotation
// on the host and the step's kernels, in order, on the compute stream.
func rankTrace(opts Options, rank int, begun time.Time, steps []profiledStep) chromeTrace {
	hostPid := 1000 + rank
	ev := []traceEvent{
		metaEvent("process_name", hostPid, 0, fmt.Sprintf("VllmWorker rank=%d", rank)),
		metaEvent("thread_name", hostPid, hostTid, "python"),
		metaEvent("process_name", gpuPid, 0, fmt.Sprintf("GPU %d", rank)),
		metaEvent("thread_name", gpuPid, streamTid, "stream 7"),
	}
	for i, ps := range steps {
		st := ps.rec
		ev = append(ev, xEvent("user_annotation", "execute_model", hostPid, hostTid, ps.start, st.end-st.start,
			map[string]any{"step": i, "num_running": st.running, "num_waiting": st.waiting,
				"prefill_tokens": st.work.prefillTokens, "decode_seqs": st.work.decodeSeqs}))
		t := ps.start
		for _, k := range st.cost.kernels {
			if k.cpu {
				ev = append(ev, xEvent("cpu_op", k.name, hostPid, hostTid, t, k.dur, nil))
			} else {
				ev = append(ev, xEvent("kernel", k.name, gpuPid, streamTid, t, k.dur,
					map[string]any{"device": rank, "stream": streamTid, "correlation": i}))
			}
			t = t.Add(k.dur)
		}
		if opts.TensorParallel > 1 {
			ev = append(ev, xEvent("kernel", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", gpuPid, streamTid, t, 0,
				map[string]any{"device": rank, "stream": streamTid}))
		}
	}
	return chromeTrace{
		SchemaVersion: 1,
		DeviceProperties: []map[string]any{{"id": rank, "name": "NVIDIA A10G (simulated)",
			"totalGlobalMem": 23836098560, "computeMajor": 8, "computeMinor": 6}},
		DistributedInfo: map[string]any{"backend": "nccl", "rank": rank, "world_size": opts.TensorParallel},
		TraceEvents:     ev,
		TraceName:       fmt.Sprintf("dp0_pp0_tp%d_dcp0_ep0_rank%d", rank, rank),
		DisplayTimeUnit: "ms",
		BaseTimeNanos:   begun.UnixNano(),
	}
}

// frontEndTrace is the API server's trace: the output handler after each
// iteration and one generate span per request that finished while
// recording, each request on the first free lane so that events on a thread
// never overlap.
func frontEndTrace(opts Options, begun time.Time, steps []profiledStep, reqs []FinishedRequest) chromeTrace {
	const pid = 1
	ev := []traceEvent{metaEvent("process_name", pid, 0, "AsyncLLM"), metaEvent("thread_name", pid, hostTid, "output_handler")}
	for _, ps := range steps {
		end := ps.start.Add(ps.rec.end - ps.rec.start)
		ev = append(ev, xEvent("python_function", "AsyncLLM.output_handler", pid, hostTid, end, 150*time.Microsecond, nil))
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
			ev = append(ev, metaEvent("thread_name", pid, 100+lane, fmt.Sprintf("request lane %d", lane)))
		}
		lanes[lane] = f.Finished
		ev = append(ev, xEvent("python_function", "AsyncLLM.generate", pid, 100+lane, f.Arrival, f.Finished.Sub(f.Arrival),
			map[string]any{"request_id": f.ID, "trace_id": f.TraceID, "finished_reason": f.Outcome}))
	}
	return chromeTrace{
		SchemaVersion: 1, TraceEvents: ev, TraceName: "async_llm", DisplayTimeUnit: "ms",
		BaseTimeNanos: begun.UnixNano(),
	}
}

// writeGzipJSON writes v as gzip-compressed JSON to path.
func writeGzipJSON(path string, v any) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("profile %s: %w", path, err)
	}
	zw := gzip.NewWriter(f)
	encErr := json.NewEncoder(zw).Encode(v)
	zErr := zw.Close()
	fErr := f.Close()
	if err := errors.Join(encErr, zErr, fErr); err != nil {
		return fmt.Errorf("profile %s: %w", path, err)
	}
	return nil
}

// kernelTable is the profiler_out_<rank>.txt summary, in the layout of
// torch's key_averages().table(sort_by="self_cuda_time_total").
func kernelTable(events []traceEvent) string {
	type row struct {
		name      string
		cpu, cuda float64 // microseconds
		calls     int
	}
	rows := map[string]*row{}
	var order []string
	var totalCPU, totalCUDA float64
	for _, e := range events {
		if e.Ph != "X" || e.Dur == nil || e.Cat == "user_annotation" {
			continue
		}
		r := rows[e.Name]
		if r == nil {
			r = &row{name: e.Name}
			rows[e.Name] = r
			order = append(order, e.Name)
		}
		r.calls++
		if e.Cat == "kernel" {
			r.cuda += *e.Dur
			totalCUDA += *e.Dur
		} else {
			r.cpu += *e.Dur
			totalCPU += *e.Dur
		}
	}
	sort.SliceStable(order, func(i, j int) bool { return rows[order[i]].cuda > rows[order[j]].cuda })
	sep := strings.Repeat("-", 55) + strings.Repeat("  "+strings.Repeat("-", 12), 5) + "  \n"
	var b strings.Builder
	b.WriteString(sep)
	fmt.Fprintf(&b, "%55s  %12s  %12s  %12s  %12s  %12s  \n", "Name", "Self CPU", "Self CUDA", "Self CUDA %", "CUDA time avg", "# of Calls")
	b.WriteString(sep)
	for _, n := range order {
		r := rows[n]
		name := r.name
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
