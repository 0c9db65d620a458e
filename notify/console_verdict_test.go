package notify

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/autocapture/autocapture/vocab"
)

// TestConsoleProfiledVerdict: the parent's profiled edit prints nothing (a
// console cannot edit what it printed); the outcome block's verdict line
// states the profile's finding, and no advice line asks for a profile.
func TestConsoleProfiledVerdict(t *testing.T) {
	var out bytes.Buffer
	c := NewConsole(&out)
	ctx := context.Background()
	th := Thread{TS: "r1"}
	v := vocab.WithProfile(&vocab.Verdict{ID: vocab.VerdictUnexplained, Evidence: []string{"ITL p99 0.3 s (threshold 0.2 s)"},
		Advice: []string{"escalate to traces (tier 2)", "if a stage is slow for no visible reason, take a short framed profile (tier 3) and read the hot kernels"}},
		&vocab.ProfileFinding{Family: "gemm", Share: 0.92, TopKernel: "ampere_bf16_s16816gemm", TopKernelShare: 0.7})
	if err := c.Close(ctx, th, Summary{RunID: "r1", Key: KeyCloseVerdictProfiled + "/pb/profile", Status: "running", Verdict: v}); err != nil {
		t.Fatal(err)
	}
	if out.Len() != 0 {
		t.Fatalf("the profiled edit printed %q, want nothing", out.String())
	}
	if err := c.Close(ctx, th, Summary{RunID: "r1", Key: KeyCloseFinished, Status: "succeeded", Verdict: v}); err != nil {
		t.Fatal(err)
	}
	want := "   verdict: unexplained by the metrics — profile: GEMM 92% of GPU time; no healthy baseline to compare " +
		"(set one with `baseline: true` on a profile step run while the server is healthy); top kernel ampere_bf16_s16816gemm 70%\n"
	if !strings.Contains(out.String(), want) {
		t.Errorf("outcome block:\n%s\nwant the line %q", out.String(), want)
	}
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "   → ") && strings.Contains(l, "framed profile") {
			t.Errorf("advice after the profile asks for one: %q", l)
		}
	}
	if !strings.Contains(out.String(), "   → escalate to traces (tier 2)\n") {
		t.Errorf("advice that is not about a profile was dropped:\n%s", out.String())
	}
}
