package triage

import (
	"fmt"

	"github.com/autocapture/autocapture/capture/gpu"
	"github.com/autocapture/autocapture/vocab"
)

// The gpu-degraded rule (issue: "the GPU"), over the gpu step's GPUView
// (capture/internal/views, capture/gpu). It holds when a GPU under the instance, in the window:
//
//   - throttled for an abnormal reason: sw_thermal, hw_thermal, hw_slowdown
//     or hw_power_brake, always; power_cap only when its SM clock sits below
//     gpu_clock_ratio × its max under load (capping at full load is routine on
//     an H100 and costs little clock); gpu_idle, clocks_setting, sync_boost and
//     display_clocks never;
//   - ran its SM clock below gpu_clock_ratio × its max under load, whatever
//     the reason (or with no reason series at all);
//   - reported an XID, an uncorrectable ECC error or a row-remap failure.
//
// "Under load": the GPU's mean util is at least gpuLoaded, or, where util is
// not reported, the instance has requests running (a host selector matches
// every GPU of the host, and an idle one beside the instance's is not under
// its load). Absent DCGM series are "GPU not measured", never
// healthy: every verdict says so (gpuContext).

// running says whether the instance has requests running.
func (r reading) running() bool {
	v, ok := r.get(vocab.SigRunning)
	return ok && v > 0
}

// gpuDegraded says whether a GPU under the instance is degraded in the window.
func (r reading) gpuDegraded() bool {
	v := r.vw.gpu
	if v == nil || !v.Measured {
		return false
	}
	for _, g := range v.GPUs {
		if s, _ := gpu.Check(g, r.th.GPUClockRatio, r.running()); len(s) > 0 {
			return true
		}
	}
	return false
}

// gpuEvidence are gpu-degraded's evidence lines.
func gpuEvidence(r reading) []string {
	var out []string
	for _, g := range r.vw.gpu.GPUs {
		_, lines := gpu.Check(g, r.th.GPUClockRatio, r.running())
		out = append(out, lines...)
	}
	return append(out, `a profile would only show "everything slow": every kernel runs slower on a throttled or faulty GPU; fix the GPU first`)
}

// gpuContext is what every verdict says of the GPUs: "GPU not measured:
// <why>" when no gpu view exists or it matched nothing (never healthy), that
// the measured GPUs showed nothing abnormal, and which GPU queries failed.
func gpuContext(r reading) []string {
	v := r.vw.gpu
	switch {
	case v == nil:
		return []string{"GPU not measured: no gpu step result (none ran, or it failed before reading Prometheus)"}
	case !v.Measured:
		return []string{"GPU not measured: " + gpu.UnmeasuredWhy(v)}
	}
	var out []string
	if !r.gpuDegraded() {
		out = append(out, fmt.Sprintf("GPU: %d measured, no abnormal throttling, low SM clock, XID or uncorrectable ECC error in the window", len(v.GPUs)))
	}
	if len(v.Failed) > 0 {
		out = append(out, "GPU partly measured: "+gpu.FailedList(v.Failed))
	}
	return out
}
