package runner

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/autocapture/autocapture/capture"
	"github.com/autocapture/autocapture/playbooks"
)

// TestHungRenewalStopsTheRun: when the lease cannot be renewed because the store
// hangs (here: SQLite's one connection held by someone else), the run's steps are
// interrupted before the lease can lapse, so no other process can take the run
// over while this one still works on it.
func TestHungRenewalStopsTheRun(t *testing.T) {
	c := newCounter()
	started := make(chan string, 1)
	stopped := make(chan error, 1)
	hold := funcStep(func(ctx context.Context, in *capture.Input) (*capture.Result, error) {
		defer c.enter(in.RunID + "/" + in.StepID)()
		started <- in.StepID
		<-ctx.Done()
		stopped <- context.Cause(ctx)
		return nil, ctx.Err()
	})
	db := dbRef{path: filepath.Join(t.TempDir(), "autocapture.db")}
	s := newService(t, db, planner(func() playbooks.PlannedStep { return step("hold", capture.TierMetrics, hold) }), true)
	acceptOne(t, s, firing("hung", time.Now()))
	<-started

	conn, err := s.db.Conn(context.Background()) // the heartbeat now waits for a connection
	if err != nil {
		t.Fatal(err)
	}
	held := time.Now()
	select {
	case cause := <-stopped:
		if !errors.Is(cause, ErrInterrupted) {
			t.Fatalf("step stopped by %v, want an interruption", cause)
		}
		t.Logf("stopped %s after the store hung (lease %s, heartbeat %s)", time.Since(held), s.cfg.LeaseTimeout, s.cfg.HeartbeatInterval)
	case <-time.After(10 * s.cfg.LeaseTimeout):
		t.Fatal("the run kept working although its lease could not be renewed")
	}
	conn.Close()
}
