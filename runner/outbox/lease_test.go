package outbox

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
)

// TestDeliveryResumesAfterItsDelivererDied: a process that crashed while
// delivering (its lease on the thread held, the parent posted but not
// acknowledged) is replaced once the lease ends; the operation it was
// sending is retried as uncertain and not doubled.
func TestDeliveryResumesAfterItsDelivererDied(t *testing.T) {
	t.Parallel()
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		s := newSink()
		blocked, hold := make(chan struct{}), make(chan struct{})
		var once sync.Once
		s.after = func(key string) error {
			first := false
			if key == keyOpen {
				once.Do(func() { first = true })
			}
			if !first {
				return nil
			}
			close(blocked)
			<-hold // the far side has it; the deliverer never learns
			return errors.New("process died")
		}
		first := newHarness(t, db, s, true)
		first.recordThread(t, "run-1")
		waitClosed(t, 20*time.Second, "the first delivery to start", blocked)
		first.crash() // dies mid-call, lease held
		newHarness(t, db, s, true)
		s.waitFor(t, "run-1", keyFinished)
		close(hold)
		time.Sleep(200 * time.Millisecond)
		checkThread(t, s, "run-1", wantThread...)
	})
}

// TestThreadMovesWithinLeaseWhenItsDelivererDies: a deliverer holds a
// thread while one reply hangs far longer than the lease (as one waiting
// for a busy channel's pace does); the heartbeat keeps its lease, so a live
// replica never takes the thread meanwhile. Then its process dies (store
// cut, nothing released) with that reply and the rest of the thread pending:
// the live replica delivers them once the dead one's lease has lapsed, not
// before, each once, in order, and well within the fixed minute the
// delivery lease used to be.
func TestThreadMovesWithinLeaseWhenItsDelivererDies(t *testing.T) {
	t.Parallel()
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		s := newSink()
		hung := make(chan struct{})
		var mu sync.Mutex
		held, ended := 0, 0
		s.hold = func(ctx context.Context, key string) error {
			if key != stepKey("pb", "a") {
				return nil
			}
			mu.Lock()
			held++
			first := held == 1
			mu.Unlock()
			if !first { // the live replica's retry
				return nil
			}
			close(hung)
			<-ctx.Done()
			mu.Lock()
			ended++
			mu.Unlock()
			return ctx.Err()
		}
		first := newHarness(t, db, s, true)
		first.recordThread(t, "run-1")
		waitClosed(t, sinkGuard, "the first step's reply to hang", hung)
		live := newHarness(t, db, s, true)
		time.Sleep(3 * testLease) // the live replica's sweeper runs all along
		mu.Lock()
		h, e := held, ended
		mu.Unlock()
		if h != 1 || e != 0 {
			t.Fatalf("the hanging reply was sent %d times, %d of them cut short, while its deliverer was alive: want one call, "+
				"its lease renewed on the heartbeat", h, e)
		}
		if keys, _ := s.thread("run-1"); idx(keys, stepKey("pb", "a")) >= 0 || idx(keys, keyFinished) >= 0 {
			t.Fatalf("thread %v while its deliverer was alive and held it: another replica took it over", keys)
		}

		owner, _ := live.threadLease(t, "run-1")
		died := time.Now()
		first.crash() // its pool closed first: the lease read next is the one the live replica waits out
		still, lapses := live.threadLease(t, "run-1")
		s.waitFor(t, "run-1", keyFinished)
		s.mu.Lock()
		moved := earliestAfter(s.at, died)
		took := s.at[keyFinished][0].Sub(died)
		s.mu.Unlock()
		t.Logf("deliverer died → live replica's first operation %s after, the lease lapsing %s after; last reply delivered %s after "+
			"(lease %s, heartbeat %s)", moved.Sub(died).Round(time.Millisecond),
			lapses.Sub(died).Round(time.Millisecond), took.Round(time.Millisecond), testLease, testHeartbeat)
		if still != owner {
			t.Logf("the live replica took the thread before its lease was read (%s, then %s): nothing to compare", owner, still)
		} else if moved.Before(lapses) {
			t.Errorf("the live replica delivered at %s, before the dead deliverer's lease lapsed at %s",
				moved.Format(time.StampMilli), lapses.Format(time.StampMilli))
		}
		// A liveness ceiling, not a speed check: the lease lapses at most a
		// lease after the death and a sweep gives the thread a job; the rest
		// is River's fetch and four deliveries, which a machine at twice its
		// cores' load stretches to seconds. It still catches a fixed minute.
		const overload = 25 * time.Second
		if bound := testLease + testHeartbeat + overload; took > bound {
			t.Errorf("the thread moved %s after its deliverer died, want ≤ lease + heartbeat + %s = %s",
				took.Round(time.Millisecond), overload, bound)
		}
		time.Sleep(300 * time.Millisecond) // a doubled operation would arrive by now
		checkThread(t, s, "run-1", wantThread...)
	})
}

// earliestAfter is the first arrival in at later than after (the zero time
// when there is none).
func earliestAfter(at map[string][]time.Time, after time.Time) time.Time {
	var first time.Time
	for _, times := range at {
		for _, ts := range times {
			if ts.After(after) && (first.IsZero() || ts.Before(first)) {
				first = ts
			}
		}
	}
	return first
}

// TestSweepGivesAThreadOneJobPerLease: a thread whose deliverer died gets one
// new delivery job, however many sweeps run on however many replicas, until
// that job has had a lease to deliver; then one more.
func TestSweepGivesAThreadOneJobPerLease(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		ctx := context.Background()
		// Not started: the sweeps are run by hand, no job is worked.
		a := newHarness(t, db, newSink(), false)
		b := newHarness(t, db, newSink(), false)
		a.ensureRun(t, "run-sweep")
		for _, q := range []string{
			`INSERT INTO autocapture_threads (run_id, sink, pump_owner, pump_until) VALUES ($1, 'default', 'job/dead', 0)`,
			`INSERT INTO autocapture_outbox (run_id, sink, seq, op, op_key, created_at) VALUES ($1, 'default', 1, 'open', 'open', 0)`,
		} {
			if _, err := a.db.ExecContext(ctx, q, "run-sweep"); err != nil {
				t.Fatal(err)
			}
		}
		sweep := func() (n int) {
			for _, h := range []*harness{a, b, a, b} {
				got, err := h.out.Sweep(ctx)
				if err != nil {
					t.Fatal(err)
				}
				n += got
			}
			return n
		}
		if n := sweep(); n != 1 {
			t.Fatalf("4 sweeps on 2 replicas gave the dead deliverer's thread %d jobs, want 1", n)
		}
		// The job never delivered (its replica died too): the lease it had lapses.
		if _, err := a.db.ExecContext(ctx, `UPDATE autocapture_threads SET pump_until = 0 WHERE run_id = $1`, "run-sweep"); err != nil {
			t.Fatal(err)
		}
		if n := sweep(); n != 1 {
			t.Fatalf("after that job's lease lapsed, 4 sweeps gave %d jobs, want 1", n)
		}
	})
}
