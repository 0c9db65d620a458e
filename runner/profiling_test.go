package runner

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// The profiling plane's own tests are in runner/profiling; these drive it
// through a whole Service: its runs, its store.

func req(target, run, step string) vocab.LeaseRequest {
	return vocab.LeaseRequest{Target: target, RunID: run, Plan: "pb", StepID: step, Hold: 5 * time.Second}
}

func mustAcquire(t *testing.T, s *Service, r vocab.LeaseRequest) vocab.ProfileLease {
	t.Helper()
	l, err := s.Profiling().Acquire(context.Background(), r)
	if err != nil {
		t.Fatalf("acquire %s for %s/%s: %v", r.Target, r.RunID, r.StepID, err)
	}
	return l
}

// TestProfileStopRequest: an operator's stop on one replica reaches the
// capture held by another (its poll sees the flag), with who asked; a run
// without a capture is ErrNoCapture, an unknown one ErrNotFound.
func TestProfileStopRequest(t *testing.T) {
	t.Parallel()
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		api := newService(t, db, planner(), false)
		holder := newService(t, db, planner(), false)
		ctx := context.Background()
		run := acceptOne(t, api, firing("fp-stop", time.Now())).RunID
		idle := acceptOne(t, api, firing("fp-idle", time.Now())).RunID
		l := mustAcquire(t, holder, req("http://10.0.0.9:8000", run, "profile"))
		if _, err := l.Recording(ctx, 30*time.Second, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := api.Profiling().StopProfile(ctx, "no-such-run", "alice"); !errors.Is(err, runs.ErrNotFound) {
			t.Fatalf("stop of an unknown run: %v", err)
		}
		if _, err := api.Profiling().StopProfile(ctx, idle, "alice"); !errors.Is(err, runs.ErrNoCapture) {
			t.Fatalf("stop of a run without a capture: %v", err)
		}
		got, err := api.Profiling().StopProfile(ctx, run, "alice")
		if err != nil {
			t.Fatal(err)
		}
		if got.StopRequestedBy != "alice" || got.StopRequestedAt == nil || got.State != vocab.LeaseRecording {
			t.Fatalf("stop request %+v", got)
		}
		if _, err := api.Profiling().StopProfile(ctx, run, "bob"); err != nil { // twice: the first asker stays
			t.Fatal(err)
		}
		select {
		case <-l.StopRequested():
		case <-time.After(10 * time.Second):
			t.Fatal("the holder never saw the stop request")
		}
		if by := l.(interface{ StopRequestedBy() string }).StopRequestedBy(); by != "alice" {
			t.Errorf("stop requested by %q, want alice", by)
		}
		rp, err := api.Profiling().RunProfile(ctx, run)
		if err != nil {
			t.Fatal(err)
		}
		if rp.Lease == nil || rp.Lease.StopRequestedBy != "alice" || len(rp.Events) != 4 ||
			rp.Events[2].Event != "stop_requested" || rp.Events[2].Actor != "alice" {
			t.Fatalf("run profile %+v", rp)
		}
		if _, err := api.Profiling().ClearProfileLease(ctx, "http://10.0.0.9:8000", "carol"); !errors.Is(err, runs.ErrNotStuck) {
			t.Fatalf("clear of a live lease: %v, want ErrNotStuck", err)
		}
		if _, err := api.Profiling().ClearProfileLease(ctx, "http://10.0.0.10:8000", "carol"); !errors.Is(err, runs.ErrNoLease) {
			t.Fatalf("clear of a free target: %v, want ErrNoLease", err)
		}
	})
}
