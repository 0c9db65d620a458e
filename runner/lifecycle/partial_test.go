package lifecycle

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/outbox"
	"github.com/autocapture/autocapture/vocab"
)

// TestFailedStepResultPersistedAndReplied: the store and the thread keep what a
// failed step gathered.
func TestFailedStepResultPersistedAndReplied(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		c := fakestep.NewCounter()
		p := planner(func() playbooks.PlannedStep {
			s := fakestep.Step("scrape", vocab.TierMetrics, fakestep.Partial(c, true, nil))
			s.Timeout = 50 * time.Millisecond
			return s
		})
		s := newProc(t, db, p, true)
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
		// The reply is recorded with the step, and says what the record says.
		key := outbox.StepReply{Plan: "pb", Step: "scrape"}.Key()
		if n := s.out.count(t, id, key); n != 1 {
			t.Fatalf("the scrape's reply recorded %d times, want once", n)
		}
		rep, err := s.Seams().Thread.StepReply(context.Background(), id, key, "pb", "scrape", false)
		if err != nil || rep.Summary != rec.Summary || !strings.Contains(rep.Error, "ran longer than its timeout") {
			t.Fatalf("thread reply %+v (%v), want the summary and the error", rep, err)
		}
	})
}
