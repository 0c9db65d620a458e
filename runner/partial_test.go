package runner

import (
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/vocab"
)

// TestFailedStepResultPersistedAndReplied: the store and the thread keep what a
// failed step gathered.
func TestFailedStepResultPersistedAndReplied(t *testing.T) {
	forEachStore(t, func(t *testing.T, db dbRef) {
		c := fakestep.NewCounter()
		n := &recNotifier{}
		p := planner(func() playbooks.PlannedStep {
			s := fakestep.Step("scrape", vocab.TierMetrics, fakestep.Partial(c, true, nil))
			s.Timeout = 50 * time.Millisecond
			return s
		})
		s := newService(t, db, p, true, notifyTo(n))
		id := acceptOne(t, s, firing("fp", time.Now().UTC())).RunID
		r := waitRun(t, s, id, "finished", isFinished)
		rec := stepByID(r, "scrape")
		if r.Status != vocab.StatusFailed || rec.Status != vocab.StatusFailed || rec.Reason != "timeout" || !rec.Partial {
			t.Fatalf("run %s, scrape %s/%s partial=%v; want failed, failed/timeout, partial", r.Status, rec.Status, rec.Reason, rec.Partial)
		}
		if rec.Summary == "" || rec.Signals[vocab.SigKVUsage] != 0.97 || rec.Findings["second_scrape_error"] != "stopped" ||
			len(rec.Artifacts) != 1 {
			t.Errorf("stored record lost the step's result: %+v", rec)
		}
		n.eventually(t, "the scrape's reply", func() bool {
			for _, x := range n.replies {
				if x.StepID == "scrape" {
					return true
				}
			}
			return false
		})
		n.mu.Lock()
		defer n.mu.Unlock()
		var rep *struct{ summary, errText string }
		for _, x := range n.replies {
			if x.StepID == "scrape" {
				rep = &struct{ summary, errText string }{x.Summary, x.Error}
			}
		}
		if rep == nil || rep.summary != rec.Summary || !strings.Contains(rep.errText, "ran longer than its timeout") {
			t.Fatalf("thread reply %+v, want the summary and the error", rep)
		}
	})
}
