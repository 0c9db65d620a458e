package lifecycle

import (
	"context"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// skewed gives a Service a clock off by d, as a replica whose NTP failed.
func skewed(d time.Duration) procOpt {
	return func(o *procOpts) { o.now = func() time.Time { return time.Now().Add(d) } }
}

// TestLeasesUseTheDatabaseClock puts two replicas on one store, one of them
// with a clock an hour off. A replica whose clock is ahead must not take a live
// run from the other, and a crashed replica's run must still be resumed within
// the lease window whichever clock is off; the resumed run finishes its steps
// (its playbook timeout, counted from the first start, is not an hour gone).
func TestLeasesUseTheDatabaseClock(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name         string
		owner, other time.Duration
	}{
		{"the other replica's clock is ahead", 0, time.Hour},
		{"the other replica's clock is behind", 0, -time.Hour},
		{"the owner's clock is ahead", time.Hour, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) { // a store each: nothing left over from another case
				ctx := context.Background()
				c := fakestep.NewCounter()
				started := make(chan string, 1)
				owner := newProc(t, db, threeTierPlanner(c, fakestep.Block(c, started, nil)), true, skewed(tc.owner))
				other := newProc(t, db, threeTierPlanner(c, fakestep.OK(c, nil)), false, skewed(tc.other))
				id := acceptOne(t, owner, firing("fp-"+tc.name, time.Now().UTC())).RunID
				fakestep.WaitFor(t, started, "step b to start on the owner")
				if n, err := other.ReapOnce(ctx); err != nil || n != 0 {
					t.Fatalf("the other replica's reaper took %d runs (%v) while the owner heartbeats; want none", n, err)
				}
				if r, _ := owner.Get(ctx, id); leaseOf(t, owner, id).owner.String != owner.Owner() || r.Resumed != 0 {
					t.Fatalf("live run held by %q, resumed %d; want the owner's, never resumed", leaseOf(t, owner, id).owner.String, r.Resumed)
				}
				owner.abandon()
				crashed := time.Now()
				if err := other.Start(ctx); err != nil {
					t.Fatal(err)
				}
				// The lease, then a ceiling for a loaded machine: far under the
				// hour of skew a clock read from the replica would add.
				within := fastRuns().LeaseTimeout + 20*time.Second
				r := waitRunWithin(t, other, id, within, isFinished)
				t.Logf("resumed and finished %s after the crash", time.Since(crashed))
				if r.Status != vocab.StatusSucceeded || r.Resumed != 1 || c.Count(id+"/c") != 1 {
					t.Fatalf("run %s (%s) resumed %d, c ran %d times; want succeeded, resumed once, c once",
						r.Status, r.Reason, r.Resumed, c.Count(id+"/c"))
				}
			})
		})
	}
}

// TestStrandedRunsUseTheDatabaseClock: a run queued by a replica whose clock is
// an hour ahead, whose job then gave up, is stranded once lease_timeout has
// passed on the database's clock; another replica's reaper takes it.
func TestStrandedRunsUseTheDatabaseClock(t *testing.T) {
	t.Parallel()
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		ahead := newProc(t, db, planner(), false, skewed(time.Hour))
		other := newProc(t, db, planner(), false)
		id := acceptOne(t, ahead, firing("fp", time.Now().UTC())).RunID
		setJob(t, other, id, "state = 'discarded', attempt = 5, finalized_at = "+dbTime(other, 0))
		time.Sleep(fastRuns().LeaseTimeout + 200*time.Millisecond)
		if n, err := other.ReapOnce(context.Background()); err != nil || n != 1 {
			t.Fatalf("reaper took %d runs (%v), want the stranded one", n, err)
		}
	})
}

// waitRunWithin polls the run until cond holds and fails the test if that takes
// longer than d.
func waitRunWithin(t *testing.T, s *proc, id string, d time.Duration, cond func(*runs.Run) bool) *runs.Run {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		r, err := s.Get(context.Background(), id)
		if err != nil {
			t.Fatalf("get run %s: %v", id, err)
		}
		if cond(r) {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s not done within %s; last: %s resumed %d", id, d, r.Status, r.Resumed)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
