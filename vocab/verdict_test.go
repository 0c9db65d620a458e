package vocab

import (
	"slices"
	"strings"
	"testing"
)

func TestFactorAdviceForEveryScopeFactor(t *testing.T) {
	for _, f := range []string{FactorSingleInstance, FactorFleetWide, FactorRoutingImbalance} {
		if len(FactorAdvice(f)) == 0 {
			t.Errorf("%s: no advice", f)
		}
		if slices.Contains(Verdicts, f) {
			t.Errorf("%s is a verdict id: a factor must not be", f)
		}
	}
	words := map[string]string{FactorSingleInstance: "route", FactorFleetWide: "roll back", FactorRoutingImbalance: "session affinity"}
	for f, w := range words {
		if !strings.Contains(strings.Join(FactorAdvice(f), " "), w) {
			t.Errorf("%s advice %q does not say %q", f, FactorAdvice(f), w)
		}
	}
}

// TestProfileFindingNamesWhatOtherIs: when no family claims most of the
// GPU's time, the finding names the kernels behind "other".
func TestProfileFindingNamesWhatOtherIs(t *testing.T) {
	f := &ProfileFinding{Family: "other", Share: 0.62, Unclassified: []KernelShare{
		{Name: "bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x8x256u2_s6_et64x8_m256x8x64_cga1x1x1_16dp256b_splitK2_TN_transOut_schedS_bN_dynB_sm100f", Share: 0.27},
		{Name: "moe_align_block_size_kernel", Share: 0.09}}}
	got := f.Text()
	for _, want := range []string{"other kernels 62% of GPU time", "bmm_MxE4m3_", "27%", "moe_align_block_size_kernel 9%"} {
		if !strings.Contains(got, want) {
			t.Errorf("finding %q lacks %q", got, want)
		}
	}
	f.Family = "gemm"
	if strings.Contains(f.Text(), "moe_align") {
		t.Errorf("a GEMM finding names the unclassified kernels: %q", f.Text())
	}
}
