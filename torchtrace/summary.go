package torchtrace

import (
	"fmt"
	"strings"
)

// Summary is the one line a thread shows, e.g. "GEMM 81% of GPU time
// (baseline 38%) · top kernel sm90_xmma_gemm_… 42% · GPU idle 6%". The
// family it leads with is the one that grew most against the baseline, or
// without deltas the largest.
func Summary(r *Report, deltas []Delta) string {
	if r == nil || r.KernelUS <= 0 {
		return "no GPU activity in the profile"
	}
	lead, leadShare, baseline := FamilyOther, -1.0, -1.0
	for _, d := range deltas {
		if d.Share > d.Baseline {
			lead, leadShare, baseline = d.Family, d.Share, d.Baseline
			break
		}
	}
	if leadShare < 0 {
		for _, f := range Families {
			if r.Families[f] > leadShare {
				lead, leadShare = f, r.Families[f]
			}
		}
	}
	parts := []string{fmt.Sprintf("%s %s of GPU time", familyLabel(lead), pct(leadShare))}
	if baseline >= 0 {
		parts[0] += fmt.Sprintf(" (baseline %s)", pct(baseline))
	}
	if lead == FamilyOther {
		parts[0] += unclassified(r)
	} else if otherNamed(r, deltas) {
		parts = append(parts, "other "+pct(r.Families[FamilyOther])+unclassified(r))
	}
	if len(r.TopKernels) > 0 {
		k := r.TopKernels[0]
		parts = append(parts, fmt.Sprintf("top kernel %s %s", shorten(k.Name, 48), pct(k.Share)))
	}
	parts = append(parts, "GPU idle "+pct(r.IdleShare))
	parts = append(parts, attributionParts(r.Attribution)...)
	if r.Frame.Inexact {
		parts = append(parts, "frame inexact: more GPU activity lay outside it than could be taken out")
	}
	return strings.Join(parts, " · ")
}

// otherNamed says whether a summary led by another family names the
// unclassified kernels too: other is the largest family, or grew against
// the baseline.
func otherNamed(r *Report, deltas []Delta) bool {
	for _, d := range deltas {
		if d.Family == FamilyOther && d.Share > d.Baseline {
			return true
		}
	}
	for _, f := range Families {
		if r.Families[f] > r.Families[FamilyOther] {
			return false
		}
	}
	return r.Families[FamilyOther] > 0
}

// unclassified names the largest kernels of family other: ": bmm_… 27%,
// … 17%, … 3%".
func unclassified(r *Report) string {
	var names []string
	for _, e := range r.Unclassified {
		if len(names) == 3 {
			break
		}
		names = append(names, shorten(shortName(e.Name), 48)+" "+pct(e.Share))
	}
	if len(names) == 0 {
		return ""
	}
	return ": " + strings.Join(names, ", ")
}

// minCredited is the share of kernels credited to an operator below which a
// summary says how many were not (the top operators then miss that time).
const minCredited = 0.95

// attributionParts are what a summary says of the attribution: the kernels
// replayed from graphs and launched before the frame (where they took at
// least 1% of GPU time), and the kernels not credited, by count and time,
// when more than 5% are.
func attributionParts(a Attribution) []string {
	if a.Events == 0 {
		return nil
	}
	var parts []string
	if a.ByGraph > 0 && share(a.ByGraphUS, a.GPUus) >= 0.01 {
		parts = append(parts, fmt.Sprintf("replayed from CUDA graphs: %d kernels, %s of GPU time", a.ByGraph, pct(share(a.ByGraphUS, a.GPUus))))
	}
	if a.BeforeFrame > 0 && share(a.BeforeFrameUS, a.GPUus) >= 0.01 {
		parts = append(parts, fmt.Sprintf("launched before the frame: %d kernels, %s of GPU time", a.BeforeFrame, pct(share(a.BeforeFrameUS, a.GPUus))))
	}
	if float64(a.Uncredited) > (1-minCredited)*float64(a.Events) || a.UncreditedUS > (1-minCredited)*a.GPUus {
		line := fmt.Sprintf("operator unknown for %d of %d kernels, %s of GPU time", a.Uncredited, a.Events, pct(share(a.UncreditedUS, a.GPUus)))
		if a.Note != "" {
			line += " (" + a.Note + ")"
		}
		parts = append(parts, line)
	}
	return parts
}

func pct(f float64) string { return fmt.Sprintf("%.0f%%", 100*f) }

// shorten cuts a kernel name (templates run to hundreds of characters)
// to n runes, marking the cut.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// summary is the attribution of the GPU events kept (events of them, us of
// GPU time).
func (at *attributor) summary(events int, us float64, hasOps bool) Attribution {
	s := Attribution{Events: events, GPUus: us,
		ByExternalID: at.byExt.n, ByExternalIDUS: at.byExt.us,
		ByLaunch: at.byLaunch.n, ByLaunchUS: at.byLaunch.us,
		ByFrame: at.byFrame.n, ByFrameUS: at.byFrame.us,
		ByGraph: at.byGraph.n, ByGraphUS: at.byGraph.us,
		BeforeFrame: at.before.n, BeforeFrameUS: at.before.us,
		ByKernelName: at.byName.n, ByKernelNameUS: at.byName.us}
	outside := at.before.n - at.byName.n // before the frame, not credited
	s.Uncredited = max(0, events-s.ByExternalID-s.ByLaunch-s.ByFrame-s.ByGraph-s.ByKernelName-outside)
	s.UncreditedUS = max(0, us-s.ByExternalIDUS-s.ByLaunchUS-s.ByFrameUS-s.ByGraphUS-s.BeforeFrameUS)
	if s.Uncredited == 0 {
		return s
	}
	if !hasOps {
		s.Note = "the trace has no operators (cpu_op)"
		return s
	}
	var parts []string
	for i, n := range at.reasons {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, reasonText[i]))
		}
	}
	s.Note = strings.Join(parts, "; ")
	return s
}
