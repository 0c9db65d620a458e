package notify

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/internal/testkit/hostile"
)

// TestConsoleHostile prints a whole thread whose alert, step summary and
// reasons hold each hostile string: every line the console prints is one it
// wrote itself (none forged from inside a value), and none carries a
// control, bidi or invisible character.
func TestConsoleHostile(t *testing.T) {
	for _, hc := range hostile.Cases() {
		t.Run(hc.Name, func(t *testing.T) {
			var out bytes.Buffer
			c := NewConsole(&out)
			ctx := context.Background()
			v := hc.Value
			th, _ := c.Open(ctx, RunInfo{ID: "r1", Alert: template.Alert{StartsAt: time.Unix(0, 0),
				Labels:      template.KV{"alertname": v, "instance": v},
				Annotations: template.KV{"summary": v}}, Playbooks: []string{"p"},
				Group: &Group{Kind: GroupStorm, Members: []Member{{RunID: "r1", Instance: v, Model: v, Status: "running"}}}})
			_ = c.Reply(ctx, th, StepReport{StepID: "s", Kind: "scrape", Status: "succeeded", Summary: v, Reason: v, Error: v})
			_ = c.Reply(ctx, th, StepReport{Member: &MemberReport{Member: Member{RunID: "r2", Instance: v, Status: "failed"},
				Reason: v, Steps: []StepReport{{StepID: "s", Kind: "scrape", Status: "failed", Summary: v}}}})
			_ = c.Close(ctx, th, Summary{RunID: "r1", Key: KeyCloseFinished, Status: "failed", Reason: v})
			for i, line := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
				if err := hostile.Controls(line, false); err != nil {
					t.Errorf("line %d: %v", i, err)
				}
				if err := hostile.Marks(line); err != nil {
					t.Errorf("line %d: %v", i, err)
				}
				if !strings.HasPrefix(line, "── ") && !strings.HasPrefix(line, "   ") {
					t.Errorf("line %d is not the console's own: %.80q", i, line)
				}
			}
			if n := strings.Count(out.String(), "\n── run r1 failed"); n != 1 {
				t.Errorf("%d end-of-run lines, want 1", n)
			}
			if strings.Contains(out.String(), "\n── run 01a2") {
				t.Error("a forged end of run reached the console")
			}
		})
	}
}
