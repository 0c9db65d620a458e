package slack

import (
	"context"
	"strings"
	"testing"

	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/vocab"
)

// TestPreliminaryVerdictThenChange: the parent shows the preliminary verdict
// as such, with no reply of its own; the refined one replaces it, and the
// change reply says what it was.
func TestPreliminaryVerdictThenChange(t *testing.T) {
	stub, n, _ := setup(t)
	ctx := context.Background()
	th, err := n.Open(ctx, testRun())
	if err != nil {
		t.Fatal(err)
	}
	pre := &vocab.Verdict{ID: "overload", Evidence: []string{"queue 48 waiting"}, Preliminary: true}
	refined := &vocab.Verdict{ID: "kv-pressure", Contributing: []string{"overload"}, Evidence: []string{"KV cache 99% full"}}
	if err := n.Close(ctx, th, notify.Summary{RunID: "r1", Key: notify.KeyCloseVerdictPreliminary, Status: "running", Verdict: pre}); err != nil {
		t.Fatal(err)
	}
	p := stub.Messages("C0AUTOCAP")[0]
	if !strings.HasPrefix(p.Text, "overload (preliminary) — queue 48 waiting") || len(p.Replies) != 0 {
		t.Fatalf("parent after the preliminary edit: %q with %d replies; want it marked preliminary, no reply", p.Text, len(p.Replies))
	}
	change := notify.VerdictChange(pre, refined)
	if err := n.Reply(ctx, th, notify.StepReport{RunID: "r1", StepID: "triage", Kind: "triage", Status: "succeeded",
		Key: "verdict/changed/pb/triage", Change: change, Verdict: refined}); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(ctx, th, notify.Summary{RunID: "r1", Key: notify.KeyCloseVerdict, Status: "running", Verdict: refined}); err != nil {
		t.Fatal(err)
	}
	p = stub.Messages("C0AUTOCAP")[0]
	if !strings.HasPrefix(p.Text, "kv-pressure — KV cache 99% full") || strings.Contains(p.Text, "preliminary") {
		t.Errorf("parent after the refined edit: %q", p.Text)
	}
	if len(p.Replies) != 1 || !strings.Contains(p.Replies[0].Text, "verdict changed — was overload, now kv-pressure (also overload): KV cache 99% full") {
		t.Fatalf("replies %+v, want the one change reply", p.Replies)
	}
	if _, key := meta(p.Replies[0]); key != "verdict/changed/pb/triage" {
		t.Errorf("change reply key %q", key)
	}
}

// TestProfiledVerdictEditsTheParent: the verdict a profile refined edits
// the parent, with no reply of its own, and the parent says the profile's
// finding where the metrics' first evidence line stood.
func TestProfiledVerdictEditsTheParent(t *testing.T) {
	stub, n, _ := setup(t)
	ctx := context.Background()
	th, err := n.Open(ctx, testRun())
	if err != nil {
		t.Fatal(err)
	}
	v := vocab.WithProfile(&vocab.Verdict{ID: vocab.VerdictUnexplained, Evidence: []string{"ITL p99 0.3 s (threshold 0.2 s)"}},
		&vocab.ProfileFinding{Family: "gemm", Share: 0.92, HasBaseline: true, BaselineShare: 0.49,
			Baseline: &vocab.BaselineRef{RunID: "r0", Baseline: true}, TopKernel: "sm90_xmma_gemm_bf16", TopKernelShare: 0.7})
	if err := n.Close(ctx, th, notify.Summary{RunID: "r1", Key: notify.KeyCloseVerdictProfiled + "/pb/profile", Status: "running", Verdict: v}); err != nil {
		t.Fatal(err)
	}
	p := stub.Messages("C0AUTOCAP")[0]
	want := "unexplained by the metrics — profile: GEMM 92% of GPU time vs 49% in the healthy baseline (top kernel sm90_xmma_gemm_bf16 70%)"
	if !strings.HasPrefix(p.Text, want) || len(p.Replies) != 0 {
		t.Errorf("parent after the profiled edit: %q with %d replies; want it to start %q, no reply", p.Text, len(p.Replies), want)
	}
}
