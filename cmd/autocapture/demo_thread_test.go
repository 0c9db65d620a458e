package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/vocab"
)

// TestDemoThreadExplains: a step not configured for want of Prometheus is
// one plain grey line naming what is missing, the stand-in said once; a
// failure keeps its reason; a not-configured step of another kind is the
// console's line.
func TestDemoThreadExplains(t *testing.T) {
	var out bytes.Buffer
	d := newDemoThread(&out, "http://127.0.0.1:1")
	ctx, th := context.Background(), notify.Thread{TS: "r1"}
	noProm := func(id string) notify.StepReport {
		return notify.StepReport{StepID: id, Kind: "chart", Tier: vocab.TierMetrics, Status: "not-configured", Reason: "no Prometheus (set prometheus.url)"}
	}
	for _, r := range []notify.StepReport{noProm("snapshot"), noProm("chart_kv"), noProm("chart_kv"),
		{StepID: "scrape", Kind: "scrape", Status: "failed", Reason: "unreachable", Error: "connection refused"},
		{StepID: "profile", Kind: "profile", Tier: vocab.TierProfile, Status: "not-configured", Reason: "no agent token (set profiling.agent_token_file)"}} {
		if err := d.Reply(ctx, th, r); err != nil {
			t.Fatal(err)
		}
	}
	got := out.String()
	if n := strings.Count(got, "tier 1 from the instance's own /metrics"); n != 1 {
		t.Errorf("the stand-in is said %d times, want once:\n%s", n, got)
	}
	if n := strings.Count(got, "not configured: no Prometheus (set prometheus.url)"); n != 3 {
		t.Errorf("%d not-configured lines for Prometheus, want 3:\n%s", n, got)
	}
	if !strings.Contains(got, "why: unreachable: connection refused") {
		t.Errorf("an unrelated failure lost its reason:\n%s", got)
	}
	if !strings.Contains(got, "step profile (profile, tier 3) not configured: no agent token (set profiling.agent_token_file)") {
		t.Errorf("the agent token's line:\n%s", got)
	}
}
