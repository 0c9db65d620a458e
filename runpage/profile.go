package runpage

import (
	"fmt"
	"math"
	"sort"

	"github.com/autocapture/autocapture/torchtrace"
	"github.com/autocapture/autocapture/vocab"
)

// A profile step's analysis as the run page reads it: each kernel family's
// share of GPU time against the capture it was compared with, so the page
// says what is abnormal ("GEMM 93% vs 49% in the healthy baseline: +44
// points"), not only the shares.

// profileView is one profile step's analysis (its findings, as
// capture.analysisFindings writes them).
type profileView struct {
	Step         string
	Summary      string
	TopFamily    string                `json:"top_family"`
	IdleShare    *float64              `json:"idle_share"`
	TopKernels   []kernelView          `json:"top_kernels"`
	ComparedWith *vocab.BaselineRef    `json:"compared_with"`
	Shift        []vocab.FamilyShift   `json:"shift"` // what moved, largest change first
	RawFamilies  map[string]float64    `json:"families"`
	Families     []familyShare         `json:"-"`
	Moved        map[string]familyMove `json:"-"` // the shift by family id
}

// familyShare is one kernel family's row: its share, and against the
// compared capture (when there was one) its share there and the change.
type familyShare struct {
	Family   string // in words: "GEMM", "memory copies"
	Share    float64
	Compared bool   // the profile was compared with a kept capture
	Baseline string // its share there as the findings know it: "49%", "≈ 2%" when it did not move
	Moved    bool   // the comparison listed it (it moved by half a point or more)
	Change   string // "+44 points", "about the same"
	Abnormal bool   // moved by abnormalPoints or more
}

// familyMove is one of the comparison's deltas: a family's share now and
// in the compared capture, 0..1.
type familyMove struct{ Share, Baseline float64 }

type kernelView struct {
	Name   string  `json:"name"`
	Family string  `json:"family"`
	Share  float64 `json:"share"`
	GPUus  float64 `json:"gpu_us"`
}

// abnormalPoints is the change of a family's share, in percentage points,
// the page marks abnormal: a shift of the GPU's time that large is a
// different workload or a different kernel, not noise between captures.
const abnormalPoints = 10

// growthMeaning is what a family taking more of the GPU's time than in the
// compared capture means.
var growthMeaning = map[string]string{
	string(torchtrace.FamilyGEMM):          "a GEMM kernel regression",
	string(torchtrace.FamilyAttention):     "an attention kernel regression",
	string(torchtrace.FamilyCommunication): "more time in collectives: check the interconnect",
	string(torchtrace.FamilyMemory):        "more time copying memory",
	string(torchtrace.FamilyOther):         "more time in other kernels",
}

func familyInWords(f string) string { return vocab.FamilyWords(f) }

// newProfileView reads a profile step's findings; false when they hold no
// analysis.
func newProfileView(step, summary string, findings map[string]any) (profileView, bool) {
	p := profileView{Step: step, Summary: summary}
	if !decodeFindings(findings, &p) || (len(p.RawFamilies) == 0 && len(p.TopKernels) == 0) {
		return p, false
	}
	p.Moved = map[string]familyMove{}
	for _, d := range p.Shift {
		p.Moved[d.Family] = familyMove{d.Share, d.Baseline}
	}
	ids := make([]string, 0, len(p.RawFamilies))
	for f := range p.RawFamilies {
		ids = append(ids, f)
	}
	sort.Slice(ids, func(i, j int) bool {
		a, b := p.RawFamilies[ids[i]], p.RawFamilies[ids[j]]
		if a != b {
			return a > b
		}
		return ids[i] < ids[j]
	})
	for _, f := range ids {
		p.Families = append(p.Families, p.row(f))
	}
	return p, true
}

// row is family f's row: its share and, when compared, the change.
func (p profileView) row(f string) familyShare {
	r := familyShare{Family: familyInWords(f), Share: p.RawFamilies[f], Compared: p.ComparedWith != nil}
	if !r.Compared {
		return r
	}
	if p.Shift == nil { // a record from before the shift was kept as data: the page does not read its text
		r.Baseline, r.Change = "—", "not recorded"
		return r
	}
	m, moved := p.Moved[f]
	if !moved { // Compare lists every family that moved by half a point
		r.Baseline, r.Change = fmt.Sprintf("≈ %.0f%%", 100*r.Share), "about the same"
		return r
	}
	// The change is between whole percents, so it reads as the headline's
	// "93% vs 49%" does.
	pts := math.Round(100*m.Share) - math.Round(100*m.Baseline)
	r.Baseline, r.Moved, r.Abnormal = fmt.Sprintf("%.0f%%", 100*m.Baseline), true, math.Abs(pts) >= abnormalPoints
	r.Change = fmt.Sprintf("%+.0f points", pts)
	if pts == 0 {
		r.Change = "under 1 point"
	}
	return r
}

// TopFamilyWords is the family with the most GPU time, in words.
func (p profileView) TopFamilyWords() string {
	if p.TopFamily == "" {
		return ""
	}
	return familyInWords(p.TopFamily)
}

// Against names the capture the profile was compared with: "the healthy
// baseline" (kept with baseline: true) or "the previous capture".
func (p profileView) Against() string {
	switch {
	case p.ComparedWith == nil:
		return ""
	case p.ComparedWith.Baseline:
		return "the healthy baseline"
	}
	return "the previous capture"
}

// Finding is what the profile found against the compared capture, the
// family that grew most: "GEMM 93% of GPU time vs 49% in the healthy
// baseline: a GEMM kernel regression"; "" when it was compared with none or
// no family grew.
func (p profileView) Finding() string {
	if p.ComparedWith == nil {
		return ""
	}
	for _, d := range p.Shift { // largest change first
		if d.Share <= d.Baseline {
			continue
		}
		line := fmt.Sprintf("%s %.0f%% of GPU time vs %.0f%% in %s", familyInWords(d.Family), 100*d.Share, 100*d.Baseline, p.Against())
		if w, ok := growthMeaning[d.Family]; ok {
			line += ": " + w
		}
		return line
	}
	return ""
}
