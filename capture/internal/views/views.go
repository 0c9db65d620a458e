// Package views is what one of capture's step families writes and another
// reads: the peers and GPU views a tier-1 step stores as a finding for
// triage, and the compact signal line the Prometheus steps end a summary with.
package views

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/autocapture/autocapture/vocab"
)

// Views beyond the one instance (issue: "this server, the whole fleet, or the
// GPU"). Two tier-1 steps look past the alerting instance's own series and
// store what they saw as a structured finding; triage reads it from whichever
// earlier step wrote it, as a struct when the step ran in this process or as
// JSON decoded from the run's record when the run resumed.
//
//	peers (capture/peers)     the same signals for every instance serving the
//	                          model, one PromQL query per signal grouped by
//	                          instance, under FindingPeers as a PeerView
//	gpu   (capture/gpu)       the NVIDIA DCGM exporter's series for the GPUs
//	                          under the instance, under FindingGPU as a GPUView
//
// Triage turns them into the verdict's Scope (capture/triage/triagescope.go) and the
// gpu-degraded rule (capture/triage/triagegpu.go). Absent views are "not measured", never
// "healthy" or "single-instance".
const (
	// FindingPeers is the findings key under which a peers step stores its PeerView.
	FindingPeers = "peers"
	// FindingGPU is the findings key under which a gpu step stores its GPUView.
	FindingGPU = "gpu"
)

// PeerView is what a peers step saw: every instance serving the alerting
// instance's model, and for each canonical signal its value per instance.
type PeerView struct {
	// Self is the alerting instance, as the instance label spells it.
	Self string `json:"self"`
	// Label is the label that names an instance (default "instance").
	Label string `json:"label"`
	// Selector is the rendered PromQL selector that chose the peers.
	Selector string `json:"selector"`
	// Instances lists every instance seen, Self included when it had data, sorted.
	Instances []string `json:"instances"`
	// Signals maps a canonical signal name to instance → value. An instance
	// missing under a signal had no sample for it (not measured, not zero).
	Signals map[string]map[string]float64 `json:"signals"`
	// Failed lists the signals whose query failed, with why.
	Failed map[string]string `json:"failed,omitempty"`
	// Window is the seconds of data the rates summarise (the longest range
	// in the queries; 0: unknown), so a rate can be read as a count.
	Window float64 `json:"window_s,omitempty"`
}

// GPUView is what a gpu step saw of the GPUs under the instance.
type GPUView struct {
	// Selector is the rendered PromQL selector that maps the instance to its GPUs.
	Selector string `json:"selector"`
	// Window is the seconds of data the view summarises.
	Window float64 `json:"window_s"`
	// GPUs are the GPUs found, by gpu index then UUID; empty when no DCGM
	// series matched (Measured false: "GPU not measured").
	GPUs []GPUState `json:"gpus"`
	// Measured says whether any DCGM series matched the selector.
	Measured bool `json:"measured"`
	// Failed lists the queries that failed, with why.
	Failed map[string]string `json:"failed,omitempty"`
}

// GPUState is one GPU over the window. A field the exporter does not report
// (not in its CSV, or a sentinel value) is nil: not measured.
type GPUState struct {
	GPU      string `json:"gpu"`                // DCGM's gpu label (index)
	UUID     string `json:"uuid,omitempty"`     // UUID | uuid
	Device   string `json:"device,omitempty"`   // nvidia0
	Model    string `json:"model,omitempty"`    // modelName
	Hostname string `json:"hostname,omitempty"` // Hostname | hostname
	Pod      string `json:"pod,omitempty"`      // pod | pod_name (pod mapping on)
	// ClockEvents are the clock event (throttle) reasons seen in the window,
	// decoded (power_cap, hw_slowdown, sw_thermal, hw_thermal,
	// hw_power_brake, sync_boost, clocks_setting, display_clocks, gpu_idle),
	// from DCGM_FI_DEV_CLOCKS_EVENT_REASONS (or its alias
	// DCGM_FI_DEV_CLOCK_THROTTLE_REASONS) or DCGM_EXP_CLOCK_EVENTS_COUNT.
	ClockEvents []string `json:"clock_events,omitempty"`
	// ClockEventsMeasured says whether any clock event series was found.
	ClockEventsMeasured bool     `json:"clock_events_measured"`
	SMClockMHz          *float64 `json:"sm_clock_mhz,omitempty"`     // lowest in the window under load
	SMClockMaxMHz       *float64 `json:"sm_clock_max_mhz,omitempty"` // the GPU's max (or the highest seen)
	TempC               *float64 `json:"temp_c,omitempty"`           // highest in the window
	PowerW              *float64 `json:"power_w,omitempty"`          // highest in the window
	Util                *float64 `json:"util,omitempty"`             // 0..1, mean over the window
	// XIDs are the XID error codes reported in the window (DCGM_FI_DEV_XID_ERRORS
	// is the last XID's value, so a change to non-zero in the window is one).
	XIDs []int `json:"xids,omitempty"`
	// ECCUncorrectable counts uncorrectable errors in the window: the larger
	// of ECCDBE and RemappedRowsUncorrectable (a DBE and the row it remaps
	// are one error).
	ECCUncorrectable *float64 `json:"ecc_uncorrectable,omitempty"`
	// ECCDBE is the volatile double-bit ECC count's increase in the window.
	ECCDBE *float64 `json:"ecc_dbe,omitempty"`
	// RemappedRowsUncorrectable is the increase in rows remapped for
	// uncorrectable errors in the window.
	RemappedRowsUncorrectable *float64 `json:"remapped_rows_uncorrectable,omitempty"`
	// RowRemapFailure is the row-remap failure flag's highest reading in the
	// window (non-zero: remapping failed).
	RowRemapFailure *float64 `json:"row_remap_failure,omitempty"`
	// NVLinkErrors counts NVLink CRC/replay/recovery errors in the window.
	NVLinkErrors *float64 `json:"nvlink_errors,omitempty"`
	// Series names, per reading (its JSON key: "power_w", "row_remap_failure",
	// …), the DCGM series it was read from (dcgmFields), so the evidence can
	// say what it read.
	Series map[string][]string `json:"series,omitempty"`
}

// Decode reads a finding as T: the struct itself, a pointer to it, or its
// JSON decoded into maps (a resumed run's record).
func Decode[T any](x any) *T {
	switch t := x.(type) {
	case nil:
		return nil
	case *T:
		return t
	case T:
		return &t
	}
	b, err := json.Marshal(x)
	if err != nil {
		return nil
	}
	out := new(T)
	if json.Unmarshal(b, out) != nil {
		return nil
	}
	return out
}

// signalOrder is how summary lines list signals: the load picture first.
var signalOrder = []string{vocab.SigQueueDepth, vocab.SigRunning, vocab.SigKVUsage, vocab.SigPreemptionsRate,
	vocab.SigTTFTP99, vocab.SigITLP99, vocab.SigQueueTimeMean, vocab.SigPrefillMean, vocab.SigDecodeMean,
	vocab.SigPromptTokens, vocab.SigAbortRatio}

// SignalLine renders the main signals compactly for a summary line.
func SignalLine(s vocab.Signals) string {
	var parts []string
	for _, name := range signalOrder {
		if v, ok := s[name]; ok {
			parts = append(parts, fmt.Sprintf("%s %s", name, FormatNumber(v)))
		}
	}
	if len(parts) == 0 {
		return "no vLLM signals"
	}
	return strings.Join(parts, " · ")
}

// FormatNumber prints a value with three significant digits, integers plainly.
func FormatNumber(v float64) string {
	if v == float64(int64(v)) && v < 1e9 && v > -1e9 {
		return fmt.Sprintf("%d", int64(v))
	}
	return fmt.Sprintf("%.3g", v)
}

// FmtNum prints a count or a rate: three significant digits, whole numbers
// from 1000 up (1650, not 1.65e+03).
func FmtNum(x float64) string {
	if x >= 1000 || x <= -1000 {
		return fmt.Sprintf("%.0f", x)
	}
	return fmt.Sprintf("%.3g", x)
}

// AppendNew appends the lines not already present.
func AppendNew(lines []string, more ...string) []string {
	for _, l := range more {
		dup := false
		for _, x := range lines {
			dup = dup || x == l
		}
		if !dup && l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// Has says whether inst had a sample under any signal.
func (v *PeerView) Has(inst string) bool {
	for _, m := range v.Signals {
		if _, ok := m[inst]; ok {
			return true
		}
	}
	return false
}

// PeerCount is the number of instances seen other than Self.
func (v *PeerView) PeerCount() int {
	n := len(v.Instances)
	if v.Has(v.Self) {
		n--
	}
	return n
}

// PeerValues are the values of sig for every instance but Self, sorted.
func (v *PeerView) PeerValues(sig string) []float64 {
	var out []float64
	for inst, x := range v.Signals[sig] {
		if inst != v.Self {
			out = append(out, x)
		}
	}
	sort.Float64s(out)
	return out
}

// PeerMedian is the median of sig over the peers (Self excluded) and how
// many peers had it.
func (v *PeerView) PeerMedian(sig string) (float64, int) {
	xs := v.PeerValues(sig)
	switch n := len(xs); {
	case n == 0:
		return 0, 0
	case n%2 == 1:
		return xs[n/2], n
	default:
		return (xs[n/2-1] + xs[n/2]) / 2, n
	}
}
