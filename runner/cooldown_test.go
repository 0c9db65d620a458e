package runner

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/autocapture/autocapture/capture"
	"github.com/autocapture/autocapture/internal/fakestep"
	"github.com/autocapture/autocapture/playbooks"
)

// TestCooldownRepeatIsSaidInTheHoldersThread: an alert that fires again
// inside a playbook's cooldown is skipped, and the thread of the run that
// holds the evidence gets one short reply saying when it fired and whose
// cooldown held it, however often the skip is recorded; the repeat is
// counted. Before, the webhook said accepted and no surface said more.
func TestCooldownRepeatIsSaidInTheHoldersThread(t *testing.T) {
	forEachStore(t, func(t *testing.T, db dbRef) {
		c := fakestep.NewCounter()
		n := &recNotifier{}
		p := fakePlanner{plans: func(template.Alert) []*playbooks.Plan {
			pl := plan("pb", fakestep.Step("snap", capture.TierMetrics, fakestep.OK(c, nil)))
			pl.Cooldown, pl.CooldownKey = 10*time.Minute, "pb/127.0.0.1:8000"
			return []*playbooks.Plan{pl}
		}}
		s := newService(t, db, p, true, notifyTo(n))
		first := acceptOne(t, s, firing("x", time.Now().UTC())).RunID
		waitRun(t, s, first, "finished", isFinished)
		n.eventually(t, "the first run's end", func() bool { return len(n.closes) > 0 })

		again := time.Date(2026, 12, 3, 3, 12, 5, 0, time.UTC)
		second := acceptOne(t, s, firing("y", again)).RunID
		if r := waitRun(t, s, second, "finished", isFinished); r.Status != StatusSkipped {
			t.Fatalf("second run %s (%s), want skipped by the cooldown", r.Status, r.Reason)
		}
		want := "fired again at 03:12:05 UTC (run " + second + "); within pb's 10m cooldown — evidence above"
		n.eventually(t, "the repeat's reply", func() bool {
			for _, rep := range n.replies {
				if rep.Notice == want && rep.RunID == first && rep.Key == cooldownKey(second) {
					return true
				}
			}
			return false
		})

		// The skip recorded again (a resumed run plans again): one reply still.
		r, err := s.getRow(context.Background(), s.db, second)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.storePlans(context.Background(), r, p.plans(r.alert), capture.Window{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond) // a doubled reply would arrive by now
		n.mu.Lock()
		defer n.mu.Unlock()
		said := 0
		for _, rep := range n.replies {
			if rep.Notice == want {
				said++
			}
		}
		if said != 1 || len(n.opens) != 1 {
			t.Errorf("the repeat said %d times in %d threads, want once in the first run's", said, len(n.opens))
		}
		if got := testutil.ToFloat64(s.m.cooldownRepeats.WithLabelValues("pb")); got != 2 {
			t.Errorf("autocapture_cooldown_repeats_total{playbook=\"pb\"} = %v, want 2 (the skip and its replay)", got)
		}
		if c.Count(second+"/snap") != 0 {
			t.Errorf("the repeat ran its step %d times, want 0", c.Count(second+"/snap"))
		}
	})
}
