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
	// Window, when set, keeps only the GPU activity inside it (wall-clock
	// time on the server's clock, placed through baseTimeNanoseconds where
	// the trace has one, wherever it sits in the file).
	Window Window
	// Frame, when set and Window is not, is how long the caller measured the
	// recording on its own clock (start_profile sent to stop_profile
	// answered): the trace's own frame — the profiler's span, else the
	// extent of its GPU activity — is clipped to at most Frame from its
	// start. No clock is compared with another's, so a server whose clock is
	// off is still read over its frame. Zero: the trace's own frame.
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
	// Window is the span of GPU activity kept (inside the frame).
	Window Window `json:"window"`
	// Frame is the stretch the idle share is measured over and GPU activity
	// is kept inside, and where it came from.
	Frame FrameInfo `json:"frame"`
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
	// launched kernels took the most GPU time (attribute.go says how each
	// kernel is linked to its operator).
	TopKernels []Entry `json:"top_kernels"`
	TopOps     []Entry `json:"top_ops,omitempty"`
	// Unclassified are the kernels of family other with the most GPU time
	// (as many as TopKernels), so that "other" always has names.
	Unclassified []Entry `json:"unclassified,omitempty"`
	// Attribution says how many GPU events were credited to an operator,
	// and how.
	Attribution Attribution `json:"attribution"`
	// Events is how many trace events were read, BytesRead the uncompressed
	// JSON bytes.
	Events    int64 `json:"events"`
	BytesRead int64 `json:"bytes_read"`

	sums *sums // the full tables behind the lists, for Merge
}

// Where a report's frame came from.
const (
	FrameWindow = "window"       // Options.Window
	FrameSpan   = "trace span"   // the profiler's span ("PyTorch Profiler (0)")
	FrameGPU    = "gpu activity" // the extent of the GPU activity (no span)
)

// FrameInfo is the stretch of time a report covers.
type FrameInfo struct {
	Source string    `json:"source,omitempty"` // FrameWindow, FrameSpan, FrameGPU
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"`
	// Clipped: Options.Frame shortened the trace's own frame.
	Clipped bool `json:"clipped,omitempty"`
	// Outside counts GPU events that lay wholly outside the frame (not
	// counted); Inexact says more lay outside than the analysis could take
	// back out (see frame.go), so some of their time is counted.
	Outside int  `json:"outside,omitempty"`
	Inexact bool `json:"inexact,omitempty"`
}

// Attribution counts the GPU events credited to what launched them, by
// method, with their GPU time (µs). Methods are disjoint; BeforeFrame
// overlaps ByKernelName (those of them credited by name).
type Attribution struct {
	Events int     `json:"events"`
	GPUus  float64 `json:"gpu_us"`
	// ByExternalID: the event's External id named its operator.
	ByExternalID   int     `json:"by_external_id"`
	ByExternalIDUS float64 `json:"by_external_id_us"`
	// ByLaunch: correlation → runtime call → the cpu_op enclosing it (for
	// writers whose External id is the event's own correlation).
	ByLaunch   int     `json:"by_launch"`
	ByLaunchUS float64 `json:"by_launch_us"`
	// ByFrame: the launch walk found no cpu_op around the runtime call but
	// a Python frame or user_annotation (a Triton kernel called from
	// Python), which is credited.
	ByFrame   int     `json:"by_frame"`
	ByFrameUS float64 `json:"by_frame_us"`
	// ByGraph: replayed from a CUDA/HIP graph, credited to the graph launch
	// and what encloses it (a cpu_op, a user_annotation, a Python frame).
	ByGraph   int     `json:"by_graph"`
	ByGraphUS float64 `json:"by_graph_us"`
	// BeforeFrame: launched before the recording began (their runtime call
	// is not in the trace); ByKernelName of them were credited to the
	// operator launching the same kernel in the frame. The others are
	// neither credited nor Uncredited.
	BeforeFrame    int     `json:"before_frame"`
	BeforeFrameUS  float64 `json:"before_frame_us"`
	ByKernelName   int     `json:"by_kernel_name"`
	ByKernelNameUS float64 `json:"by_kernel_name_us"`
	Uncredited     int     `json:"uncredited"`
	UncreditedUS   float64 `json:"uncredited_us"`
	Note           string  `json:"note,omitempty"` // why some were not credited
}

// Credited is the share of GPU events credited to what launched them (0..1;
// 1 without events).
func (a Attribution) Credited() float64 {
	if a.Events == 0 {
		return 1
	}
	return float64(a.ByExternalID+a.ByLaunch+a.ByFrame+a.ByGraph+a.ByKernelName) / float64(a.Events)
}

// CreditedTime is the share of GPU time credited (0..1; 1 without GPU
// time).
func (a Attribution) CreditedTime() float64 {
	if a.GPUus <= 0 {
		return 1
	}
	return min(1, (a.ByExternalIDUS+a.ByLaunchUS+a.ByFrameUS+a.ByGraphUS+a.ByKernelNameUS)/a.GPUus)
}

// ErrNotTrace: the input is not a Chrome trace (no traceEvents array).
var ErrNotTrace = errors.New("torchtrace: not a Chrome trace")

// Delta is one family's share now and in the baseline.
type Delta struct {
	Family   Family  `json:"family"`
	Share    float64 `json:"share"`
	Baseline float64 `json:"baseline"`
}
