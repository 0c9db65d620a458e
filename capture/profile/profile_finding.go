package profile

import (
	"github.com/autocapture/autocapture/torchtrace"
	"github.com/autocapture/autocapture/vocab"
)

// findingUnclassified is how many unclassified kernels a finding names.
const findingUnclassified = 3

// finding is what the capture found, as the run's verdict carries it: the
// family that grew most against the compared capture (else the one with
// the most GPU time), the top kernel, every family's share and what moved.
// nil when the traces showed no GPU activity.
func finding(in *vocab.Input, rep *Report, reportKey string) *vocab.ProfileFinding {
	a := rep.Analysis
	if a == nil || a.KernelUS <= 0 {
		return nil
	}
	f := &vocab.ProfileFinding{Plan: in.Plan, Step: in.StepID, Shares: map[string]float64{}, IdleShare: a.IdleShare,
		OtherShare: a.Families[torchtrace.FamilyOther], Report: reportKey}
	lead := -1.0
	for _, fam := range torchtrace.Families {
		s := a.Families[fam]
		f.Shares[string(fam)] = s
		if s > lead {
			f.Family, f.Share, lead = string(fam), s, s
		}
	}
	if len(a.TopKernels) > 0 {
		f.TopKernel, f.TopKernelShare = a.TopKernels[0].Name, a.TopKernels[0].Share
	}
	for i, k := range a.Unclassified {
		if i == findingUnclassified {
			break
		}
		f.Unclassified = append(f.Unclassified, vocab.KernelShare{Name: k.Name, Share: k.Share})
	}
	if rep.Baseline == nil {
		return f
	}
	f.HasBaseline, f.Baseline = true, rep.Baseline
	f.Shift = shiftOf(rep.Deltas)
	f.BaselineShare = f.Share      // a family Compare did not list moved by under half a point
	for _, d := range rep.Deltas { // largest change first: the first that grew explains
		if d.Share > d.Baseline {
			f.Family, f.Share, f.BaselineShare = string(d.Family), d.Share, d.Baseline
			return f
		}
	}
	for _, d := range rep.Deltas {
		if string(d.Family) == f.Family {
			f.BaselineShare = d.Baseline
		}
	}
	return f
}

// shiftOf is the comparison's deltas as the verdict and the run page read
// them; empty, not nil, when nothing moved (the run page tells "compared,
// nothing moved" from a record without the shift).
func shiftOf(deltas []torchtrace.Delta) []vocab.FamilyShift {
	out := make([]vocab.FamilyShift, 0, len(deltas))
	for _, d := range deltas {
		out = append(out, vocab.FamilyShift{Family: string(d.Family), Share: d.Share, Baseline: d.Baseline})
	}
	return out
}
