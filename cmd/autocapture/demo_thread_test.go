package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/autocapture/autocapture/notify"
)

// TestDemoThreadExplains: a step that failed only for want of Prometheus is
// one plain line (the stand-in said once), and a partial run's reason is
// rewritten only when every step it lists is such a step.
func TestDemoThreadExplains(t *testing.T) {
	var out bytes.Buffer
	d := newDemoThread(&out, "http://127.0.0.1:1")
	ctx, th := context.Background(), notify.Thread{TS: "r1"}
	noProm := func(id string) notify.StepReport {
		return notify.StepReport{StepID: id, Kind: "chart", Status: "failed", Reason: "bad-config", Error: "chart: no Prometheus or artifact store configured"}
	}
	for _, r := range []notify.StepReport{noProm("snapshot"), noProm("chart_kv"), noProm("chart_kv"),
		{StepID: "scrape", Kind: "scrape", Status: "failed", Reason: "unreachable", Error: "connection refused"}} {
		if err := d.Reply(ctx, th, r); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(out.String(), "tier 1 from the instance's own /metrics"); n != 1 {
		t.Errorf("the stand-in is said %d times, want once:\n%s", n, out.String())
	}
	if !strings.Contains(out.String(), "why: unreachable: connection refused") {
		t.Errorf("an unrelated failure lost its reason:\n%s", out.String())
	}
	for _, tc := range []struct{ name, reason, want string }{
		{"only the Prometheus steps", "pb: 2 of 7 steps did not finish: snapshot (bad-config), chart_kv (bad-config)",
			"partial only because snapshot, chart_kv need a Prometheus"},
		{"another step too", "pb: 3 of 7 steps did not finish: snapshot (bad-config), chart_kv (bad-config), scrape (unreachable)",
			"pb: 3 of 7 steps did not finish: snapshot (bad-config), chart_kv (bad-config), scrape (unreachable)"},
		{"another reason", "run timed out", "run timed out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := d.explain(tc.reason); !strings.HasPrefix(got, tc.want) {
				t.Errorf("explain(%q) = %q, want %q…", tc.reason, got, tc.want)
			}
		})
	}
}
