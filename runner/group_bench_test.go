package runner

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
)

// BenchmarkStormToLastReply measures, with Slack's default pace (1 post/s,
// burst 3) against the stand-in, the time from a 200-alert webhook to the
// storm thread's last member reply (SQLite). The channel is the bottleneck:
// about one reply a second, the parent's edits coalesced between them.
//
//	go test ./runner -run '^$' -bench StormToLastReply -benchtime 1x
func BenchmarkStormToLastReply(b *testing.B) {
	for b.Loop() {
		stub := newGroupStub(b)
		db := testenv.DB{Path: filepath.Join(b.TempDir(), "autocapture.db")}
		s := newService(b, db, threeSteps(fakestep.NewCounter()), true, slackTo(b, stub, 1), withConcurrency(16))
		var alerts []template.Alert
		for i := range 200 {
			alerts = append(alerts, fleetAlert(fmt.Sprintf("bench%03d", i), "llama-70b", i, time.Now().UTC()))
		}
		start := time.Now()
		if _, err := s.Accept(context.Background(), alerts); err != nil {
			b.Fatal(err)
		}
		var first time.Duration
		for deadline := time.Now().Add(10 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
			ms := parents(stub)
			if len(ms) == 1 && first == 0 {
				first = ms[0].Revisions[0].At.Sub(start)
			}
			if len(ms) == 1 && countPrefix(keysOf(ms[0]), "member/") == 200 {
				last := ms[0].Replies[len(ms[0].Replies)-1].Revisions[0].At.Sub(start)
				b.ReportMetric(first.Seconds(), "s-to-parent")
				b.ReportMetric(last.Seconds(), "s-to-last-reply")
				b.ReportMetric(float64(len(ms[0].Revisions)-1), "parent-edits")
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("%d parents", len(ms))
			}
		}
	}
}
