package vocab

import (
	"strings"
	"testing"
)

// TestProfileFindingText: the finding says the family's share against the
// capture it was compared with (the healthy baseline or the previous
// capture) and the top kernel, or that there was none to compare with and
// how to set one.
func TestProfileFindingText(t *testing.T) {
	long := strings.Repeat("k", 60)
	for name, tc := range map[string]struct {
		f    *ProfileFinding
		want string
	}{
		"healthy baseline": {&ProfileFinding{Family: "gemm", Share: 0.921, HasBaseline: true, BaselineShare: 0.49,
			Baseline: &BaselineRef{Baseline: true}, TopKernel: "sm90_xmma_gemm", TopKernelShare: 0.61},
			"profile: GEMM 92% of GPU time vs 49% in the healthy baseline (top kernel sm90_xmma_gemm 61%)"},
		"previous capture": {&ProfileFinding{Family: "communication", Share: 0.4, HasBaseline: true, BaselineShare: 0.1,
			Baseline: &BaselineRef{}}, "profile: communication 40% of GPU time vs 10% in the previous capture"},
		"no baseline, long kernel name": {&ProfileFinding{Family: "attention", Share: 0.7, TopKernel: long, TopKernelShare: 0.5},
			"profile: attention 70% of GPU time; no healthy baseline to compare (" + setBaselineHint + "); top kernel " +
				strings.Repeat("k", 47) + "… 50%"},
	} {
		if got := tc.f.Text(); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", name, got, tc.want)
		}
	}
}

// TestWithProfile: a profile refines a verdict without changing its cause:
// the same id and evidence, the finding attached, no longer preliminary,
// the finding's advice first and no advice about taking a profile; the
// verdict it refined is left as it was.
func TestWithProfile(t *testing.T) {
	v := &Verdict{ID: VerdictUnexplained, Preliminary: true, Evidence: []string{"ITL p99 0.3 s"},
		Advice: []string{"escalate to traces (tier 2)", "take a short framed profile (tier 3) and read the hot kernels"}}
	f := &ProfileFinding{Family: "gemm", Share: 0.92, HasBaseline: true, BaselineShare: 0.49, Baseline: &BaselineRef{Baseline: true}}
	got := WithProfile(v, f)
	if got.ID != v.ID || got.Profile != f || got.Preliminary || len(got.Evidence) != 1 {
		t.Fatalf("refined %+v: want the same cause and evidence, the finding, not preliminary", got)
	}
	if len(got.Advice) != 2 || got.Advice[0] != familyAdvice["gemm"] || got.Advice[1] != "escalate to traces (tier 2)" {
		t.Errorf("advice %q: want the GEMM advice, then the traces line, no profile line", got.Advice)
	}
	if v.Profile != nil || len(v.Advice) != 2 || !v.Preliminary {
		t.Errorf("the refined verdict was changed: %+v", v)
	}
	if s := VerdictText(got); s != "unexplained by the metrics — "+f.Text() {
		t.Errorf("verdict text %q", s)
	}
	if s := VerdictText(&Verdict{ID: VerdictKVPressure}); s != VerdictKVPressure {
		t.Errorf("verdict text without a profile %q, want the id", s)
	}
}
