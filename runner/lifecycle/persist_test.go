package lifecycle

import (
	"context"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/vocab"
)

// TestUnpersistedStepIsNeverASilentSuccess: a step whose record the store
// refuses (here a NaN finding JSON cannot encode) stops the run for resume
// instead of letting it finish succeeded without the step. The attempt is
// used up, so a step that can never be stored ends the run failed; one that
// can on the next attempt is run again and kept.
func TestUnpersistedStepIsNeverASilentSuccess(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		var calls atomic.Int32
		snap := fakestep.Func(func(context.Context, *vocab.Input) (*vocab.Result, error) {
			if calls.Add(1) == 1 {
				return &vocab.Result{Summary: "idle", Findings: map[string]any{"ratio": math.NaN()}}, nil
			}
			return &vocab.Result{Summary: "ok", Findings: map[string]any{"ratio": 0.5}}, nil
		})
		p := planner(func() playbooks.PlannedStep { return fakestep.Step("snap", vocab.TierMetrics, snap) })
		s := newProc(t, db, p, true)
		id := acceptOne(t, s, firing("fp", time.Now().UTC())).RunID
		r := waitRun(t, s, id, "finished", isFinished)
		if r.Status != vocab.StatusSucceeded || calls.Load() != 2 || r.Attempts != 2 {
			t.Fatalf("run %s after %d attempts, step ran %d times; want succeeded on attempt 2, step run twice",
				r.Status, r.Attempts, calls.Load())
		}
		if st := stepByID(r, "snap"); st.Status != vocab.StatusSucceeded || st.Findings["ratio"] != 0.5 {
			t.Errorf("stored step %+v, want the second attempt's record", st)
		}
	})
}

// TestStepThatCanNeverBeStoredFailsTheRun: the attempts are bounded, so a
// record the store always refuses ends in failed, not a loop.
func TestStepThatCanNeverBeStoredFailsTheRun(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		c := fakestep.NewCounter()
		p := planner(func() playbooks.PlannedStep {
			return fakestep.Step("snap", vocab.TierMetrics, fakestep.OK(c, map[string]any{"ratio": math.Inf(1)}))
		})
		s := newProc(t, db, p, true)
		id := acceptOne(t, s, firing("fp", time.Now().UTC())).RunID
		r := waitRun(t, s, id, "finished", isFinished)
		if r.Status != vocab.StatusFailed || c.Count(id+"/snap") != fastRuns().MaxAttempts {
			t.Fatalf("run %s (%s), step ran %d times; want failed after %d attempts", r.Status, r.Reason,
				c.Count(id+"/snap"), fastRuns().MaxAttempts)
		}
	})
}
