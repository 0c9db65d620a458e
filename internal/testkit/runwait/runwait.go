// Package runwait waits on a run the way the run service's tests read it:
// through whatever answers Get, lifecycle's Runs or the runner's Service.
package runwait

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/runner/runs"
)

// Getter reads one run.
type Getter interface {
	Get(ctx context.Context, id string) (*runs.Run, error)
}

// Until polls run id until cond holds: a hang guard of 60 s, not a timing
// assertion. what names the state in the failure.
func Until(t testing.TB, g Getter, id, what string, cond func(*runs.Run) bool) *runs.Run {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		r, err := g.Get(context.Background(), id)
		if err != nil && !errors.Is(err, runs.ErrNotFound) {
			t.Fatalf("get run %s: %v", id, err)
		}
		if err == nil && cond(r) {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s never became %s; last: %+v", id, what, r)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Finished says whether the run has ended, whatever its status.
func Finished(r *runs.Run) bool { return r.FinishedAt != nil }

// Step is the record of the run's step id, zero if it has none.
func Step(r *runs.Run, id string) executor.StepRecord {
	for _, s := range r.Steps {
		if s.ID == id {
			return s
		}
	}
	return executor.StepRecord{}
}
