// Package torchtrace reads the Chrome-trace JSON files vLLM's torch profiler
// writes (Kineto's format, gzipped or not) as a stream, in bounded memory, and
// says where the GPU time went: top kernels and operators, the share per
// kernel family, the GPU's idle share over the capture window, and how that
// compares with a baseline capture.
//
// Memory is bounded whatever the file's size (one event at a time, the
// External-id links in a chunked table, the busy intervals per device in a
// sort-merged set: the bounds are listed in README.md); a 1 GiB gzipped
// trace (16.7 GB of JSON) reads at ~200 MB/s of JSON in 67 MiB of RSS
// (bench/profile.sh).
//
// CONTRACT (lead, 2026-12-01): the types and signatures below are fixed; the
// bodies are filled in by the torchtrace owner.
package torchtrace

import (
	"errors"
	"time"
)

// Family is a kernel family.
type Family string

// The kernel families a report sums GPU time into.
const (
	FamilyGEMM          Family = "gemm"
	FamilyAttention     Family = "attention"
	FamilyCommunication Family = "communication"
	FamilyMemory        Family = "memory" // memcpy, memset
	FamilyOther         Family = "other"
)

// Families lists every family in report order.
var Families = []Family{FamilyGEMM, FamilyAttention, FamilyCommunication, FamilyMemory, FamilyOther}

// Options bound an analysis.
type Options struct {
	// Window, when set, keeps only the GPU activity inside it (the frame
	// between start_profile and stop_profile): the profiler's own start-up and
	// flush are not read as part of the incident. Zero: the whole file.
	Window Window
	// Frame, when set and Window is not, keeps the GPU activity of the first
	// Frame after the trace's own start (baseTimeNanoseconds, the moment the
	// profiler started, on the server's clock). The caller measures the frame
	// on its own clock; no clock is compared with another's, so a server
	// whose clock is off (or a simulator whose clock lags) is still read
	// over the frame. A trace without baseTimeNanoseconds is read whole.
	Frame time.Duration
	// Top is how many kernels and operators to list (0: 10).
	Top int
}

// Window is a stretch of wall-clock time.
type Window struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

// Entry is one kernel or operator with its summed GPU time.
type Entry struct {
	Name   string  `json:"name"`
	Family Family  `json:"family,omitempty"`
	GPUus  float64 `json:"gpu_us"`
	Count  int     `json:"count"`
	Share  float64 `json:"share"` // of the report's kernel GPU time, 0..1
}

// Report is what one file, or several merged, says.
type Report struct {
	Files int `json:"files"`
	// Ranks are the device indexes seen.
	Ranks []int `json:"ranks,omitempty"`
	// Window is the span of GPU activity read (inside Options.Window when set).
	Window Window `json:"window"`
	// KernelUS is the summed duration of kernel (and memory) events; streams
	// overlap, so it can exceed wall time.
	KernelUS float64 `json:"kernel_us"`
	// IdleShare is the share of the window in which a device ran nothing
	// (wall time minus the union of its kernel intervals), averaged over ranks.
	IdleShare float64 `json:"idle_share"`
	// Families is each family's share of KernelUS (0..1; they sum to 1 when
	// KernelUS > 0).
	Families map[Family]float64 `json:"families"`
	// TopKernels by GPU time; TopOps are the CPU operators (cpu_op) whose
	// launched kernels took the most GPU time (linked by "External id" /
	// correlation).
	TopKernels []Entry `json:"top_kernels"`
	TopOps     []Entry `json:"top_ops,omitempty"`
	// Events is how many trace events were read, BytesRead the uncompressed
	// JSON bytes.
	Events    int64 `json:"events"`
	BytesRead int64 `json:"bytes_read"`

	sums *sums // the full tables behind the lists, for Merge
}

// ErrNotTrace: the input is not a Chrome trace (no traceEvents array).
var ErrNotTrace = errors.New("torchtrace: not a Chrome trace")

// Delta is one family's share now and in the baseline.
type Delta struct {
	Family   Family  `json:"family"`
	Share    float64 `json:"share"`
	Baseline float64 `json:"baseline"`
}
