package vocab

import (
	"fmt"
	"slices"
	"strings"
)

// ProfileFinding is what a framed profile found, as the verdict carries it:
// where the GPU's time went and, against a kept capture, what moved. The
// profile step reports it (Result.Profile); the run records the verdict it
// refines with it, so every surface reads the same structure.
type ProfileFinding struct {
	// Plan and Step name the profile step that found it.
	Plan string `json:"plan"`
	Step string `json:"step"`
	// Family is the kernel family the finding is about (torchtrace's ids:
	// gemm, attention, communication, memory, other): the one that grew
	// most against the compared capture, else the one with the most GPU time.
	Family string  `json:"family"`
	Share  float64 `json:"share"` // its share of GPU time, 0..1
	// HasBaseline says the capture was compared with a kept one (Baseline
	// names it); BaselineShare is Family's share there.
	HasBaseline   bool         `json:"has_baseline"`
	BaselineShare float64      `json:"baseline_share,omitempty"`
	Baseline      *BaselineRef `json:"baseline,omitempty"`
	// Shift lists the families that moved against the compared capture,
	// largest change first.
	Shift []FamilyShift `json:"shift,omitempty"`
	// TopKernel is the kernel with the most GPU time, TopKernelShare its share.
	TopKernel      string  `json:"top_kernel,omitempty"`
	TopKernelShare float64 `json:"top_kernel_share,omitempty"`
	// OtherShare is the share of GPU time in kernels no family claims;
	// Unclassified names the largest of them, so "other" is never a mystery.
	OtherShare   float64       `json:"other_share"`
	Unclassified []KernelShare `json:"unclassified,omitempty"`
	// Shares is every family's share of GPU time.
	Shares map[string]float64 `json:"shares"`
	// IdleShare is the share of the frame the GPU ran no kernel.
	IdleShare float64 `json:"idle_share"`
	// Report is the stored profile-report.json's key ("" when not stored).
	Report string `json:"report,omitempty"`
}

// KernelShare is one kernel's share of GPU time, 0..1.
type KernelShare struct {
	Name  string  `json:"name"`
	Share float64 `json:"share"`
}

// FamilyShift is one family's share now and in the compared capture, 0..1.
type FamilyShift struct {
	Family   string  `json:"family"`
	Share    float64 `json:"share"`
	Baseline float64 `json:"baseline"`
}

// Kernel families as a reader says them.
var familyWords = map[string]string{
	"gemm":          "GEMM",
	"attention":     "attention",
	"communication": "communication",
	"memory":        "memory copies",
	"other":         "other kernels",
}

// FamilyWords is a kernel family's id in words ("gemm" → "GEMM").
func FamilyWords(id string) string {
	if w, ok := familyWords[id]; ok {
		return w
	}
	return id
}

// setBaselineHint is how a reader gets a baseline to compare with.
const setBaselineHint = "set one with `baseline: true` on a profile step run while the server is healthy"

// Against names what the finding was compared with: "the healthy baseline"
// or "the previous capture"; "" when nothing.
func (f *ProfileFinding) Against() string {
	switch {
	case f == nil || !f.HasBaseline:
		return ""
	case f.Baseline != nil && !f.Baseline.Baseline:
		return "the previous capture"
	}
	return "the healthy baseline"
}

// Text is the finding in one phrase: "profile: GEMM 92% of GPU time vs 49%
// in the healthy baseline (top kernel ampere_… 61%)", or without a capture
// to compare with "profile: GEMM 92% of GPU time; no healthy baseline to
// compare (set one with …); top kernel ampere_… 61%".
func (f *ProfileFinding) Text() string {
	if f == nil {
		return ""
	}
	s := fmt.Sprintf("profile: %s %.0f%% of GPU time", FamilyWords(f.Family), 100*f.Share)
	if f.Family == "other" && len(f.Unclassified) > 0 {
		names := make([]string, len(f.Unclassified))
		for i, k := range f.Unclassified {
			names[i] = fmt.Sprintf("%s %.0f%%", shortKernel(k.Name), 100*k.Share)
		}
		s += " (" + strings.Join(names, ", ") + ")"
	}
	top := ""
	if f.TopKernel != "" {
		top = fmt.Sprintf("top kernel %s %.0f%%", shortKernel(f.TopKernel), 100*f.TopKernelShare)
	}
	if f.HasBaseline {
		s += fmt.Sprintf(" vs %.0f%% in %s", 100*f.BaselineShare, f.Against())
		if top != "" {
			s += " (" + top + ")"
		}
		return s
	}
	s += "; no healthy baseline to compare (" + setBaselineHint + ")"
	if top != "" {
		s += "; " + top
	}
	return s
}

// shortKernel cuts a kernel's name (templates run to hundreds of
// characters) to a length a verdict line can carry.
func shortKernel(name string) string {
	const n = 48
	if r := []rune(name); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return name
}

// VerdictText is the verdict in words with what explains it once a profile
// refined it: "unexplained by the metrics — profile: GEMM 92% …", "kv-pressure
// — profile: …"; the bare id without a profile.
func VerdictText(v *Verdict) string {
	if v == nil {
		return ""
	}
	if v.Profile == nil {
		return v.ID
	}
	head := v.ID
	if v.ID == VerdictUnexplained {
		head = "unexplained by the metrics"
	}
	return head + " — " + v.Profile.Text()
}

// familyAdvice is what to do once a profile shows a family taking the GPU's
// time (grown against the compared capture, or leading without one).
var familyAdvice = map[string]string{
	"gemm":          "the GEMM kernels take the GPU's time: compare the top kernel with a healthy capture's (a different cuBLAS/CUTLASS kernel, dtype or shape after a vLLM, driver or model change)",
	"attention":     "the attention kernels take the GPU's time: check the attention backend and the context lengths served (a backend fallback, longer contexts)",
	"communication": "collectives take the GPU's time: check the interconnect (NVLink/PCIe errors, a slower peer GPU) and the tensor-parallel size",
	"memory":        "memory copies take the GPU's time: look for host↔device copies in the serving path (offloading, a swap space in use)",
	"other":         "kernels outside the known families take the GPU's time: read the top kernels in the profile report",
}

// WithProfile is v refined by a profile's finding: the same cause (the
// profile explains it, it does not invent another), the finding attached
// and its advice first. Advice that mentions a profile is dropped: it was
// about taking one (or not needing one), which is moot once one was taken.
func WithProfile(v *Verdict, f *ProfileFinding) *Verdict {
	if v == nil || f == nil {
		return v
	}
	out := *v
	out.Profile = f
	out.Preliminary = false
	var advice []string
	if a, ok := familyAdvice[f.Family]; ok {
		advice = append(advice, a)
	}
	if !f.HasBaseline {
		advice = append(advice, "no healthy capture to compare with: "+setBaselineHint)
	}
	for _, a := range v.Advice {
		if !strings.Contains(strings.ToLower(a), "profile") && !slices.Contains(advice, a) {
			advice = append(advice, a)
		}
	}
	out.Advice = advice
	return &out
}
