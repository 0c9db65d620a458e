package runner

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/notify"
)

// hangingReply holds the reply keyed key, before it reaches the far side,
// until the deliverer's context ends (its process dies); hung is closed once
// it holds one. It counts the calls it held and those that ended.
type hangingReply struct {
	*farSide
	key         string
	hung        chan struct{}
	once        sync.Once
	mu          sync.Mutex
	held, ended int
}

func (h *hangingReply) Reply(ctx context.Context, t notify.Thread, r notify.StepReport) error {
	if r.Key != h.key {
		return h.farSide.Reply(ctx, t, r)
	}
	h.mu.Lock()
	h.held++
	h.mu.Unlock()
	h.once.Do(func() { close(h.hung) })
	<-ctx.Done()
	h.mu.Lock()
	h.ended++
	h.mu.Unlock()
	return ctx.Err()
}

func (h *hangingReply) counts() (held, ended int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held, h.ended
}

// TestThreadMovesWithinLeaseWhenItsDelivererDies: a deliverer holds a
// thread while one reply hangs far longer than runs.lease_timeout (as one
// waiting for a busy channel's pace does); the heartbeat keeps its lease, so
// a live replica never takes the thread meanwhile. Then its replica dies
// (store cut, nothing released) with that reply and the rest of the run's
// thread pending: the live replica delivers them once the dead one's lease
// has lapsed, not before, each once, in order, and well within the fixed
// minute the delivery lease used to be (issue 22).
func TestThreadMovesWithinLeaseWhenItsDelivererDies(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, db dbRef) {
		f := newFarSide()
		hang := &hangingReply{farSide: f, key: stepKey("pb", "a"), hung: make(chan struct{})}
		first := newService(t, db, threeSteps(fakestep.NewCounter()), true, notifyTo(hang))
		id := acceptOne(t, first, firing("fp", time.Now().UTC())).RunID
		fakestep.WaitFor(t, hang.hung, "the first step's reply to hang")
		waitRun(t, first, id, "finished", isFinished)
		live := newService(t, db, threeSteps(fakestep.NewCounter()), true, notifyTo(f))
		cfg := first.life.Config()
		time.Sleep(3 * cfg.LeaseTimeout) // the live replica's sweeper runs all along
		if held, ended := hang.counts(); held != 1 || ended != 0 {
			t.Fatalf("the hanging reply was sent %d times, %d of them cut short, while its deliverer was alive: want one call, "+
				"its lease renewed on the heartbeat", held, ended)
		}
		if keys, _ := f.thread(id); idx(keys, stepKey("pb", "a")) >= 0 || idx(keys, keyFinished) >= 0 {
			t.Fatalf("thread %v while its deliverer was alive and held it: another replica took it over", keys)
		}

		owner, _ := threadLease(t, live, id)
		died := time.Now()
		// It dies mid-call as a SIGKILL would: its lease held, its River job
		// left running. Its stores are cut first: it renews nothing more, so
		// the lease read then is the one the live replica waits out. Then
		// abandon, with River's own pool closed: River's stop would record
		// the job's end, and another replica would run the same job again,
		// with the same owner, taking the thread back before the lease lapsed.
		crash(first)
		_ = rawDB(first).Close()
		still, lapses := threadLease(t, live, id)
		first.abandon()
		f.waitFor(t, id, keyFinished)
		f.mu.Lock()
		moved := earliestAfter(f.at, died)
		took := f.at[keyFinished][0].Sub(died) // when it arrived, not when kill's wait for River let us look
		f.mu.Unlock()
		t.Logf("deliverer died → live replica's first operation %s after, the lease lapsing %s after; last reply delivered %s after "+
			"(lease_timeout %s, heartbeat_interval %s)", moved.Sub(died).Round(time.Millisecond),
			lapses.Sub(died).Round(time.Millisecond), took.Round(time.Millisecond), cfg.LeaseTimeout, cfg.HeartbeatInterval)
		if still != owner {
			t.Logf("the live replica took the thread before its lease was read (%s, then %s): nothing to compare", owner, still)
		} else if moved.Before(lapses) {
			t.Errorf("the live replica delivered at %s, before the dead deliverer's lease lapsed at %s",
				moved.Format(time.StampMilli), lapses.Format(time.StampMilli))
		}
		// A liveness ceiling, not a speed check: the lease lapses at most
		// lease_timeout after the death and a reaper tick gives the thread a
		// job; the rest is River's fetch and four deliveries, which a machine
		// at twice its cores' load stretches to seconds. It still catches
		// the fixed minute the lease used to be.
		const overload = 25 * time.Second
		if bound := cfg.LeaseTimeout + cfg.HeartbeatInterval + overload; took > bound {
			t.Errorf("the thread moved %s after its deliverer died, want ≤ lease_timeout + heartbeat_interval + %s = %s",
				took.Round(time.Millisecond), overload, bound)
		}
		time.Sleep(300 * time.Millisecond) // a doubled operation would arrive by now
		checkThread(t, f, id, wantThread...)
	})
}

// threadLease is run id's thread lease, read from the database through s:
// its owner and when it lapses (pump_until, milliseconds on the database's
// clock).
func threadLease(t *testing.T, s *Service, id string) (owner string, lapses time.Time) {
	t.Helper()
	var until int64
	q := `SELECT pump_owner, pump_until FROM autocapture_threads WHERE run_id = $1 AND pump_until IS NOT NULL`
	if err := s.db.QueryRowContext(context.Background(), q, id).Scan(&owner, &until); err != nil {
		t.Fatalf("the thread lease of run %s: %v", id, err)
	}
	return owner, time.UnixMilli(until)
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
	forEachStore(t, func(t *testing.T, db dbRef) {
		ctx := context.Background()
		// Not started: the sweeps are run by hand, no job is worked.
		a := newService(t, db, threeSteps(fakestep.NewCounter()), false, notifyTo(newFarSide()))
		b := newService(t, db, threeSteps(fakestep.NewCounter()), false, notifyTo(newFarSide()))
		id := acceptOne(t, a, firing("fp-sweep", time.Now().UTC())).RunID
		for _, q := range []string{
			`INSERT INTO autocapture_threads (run_id, sink, pump_owner, pump_until) VALUES ($1, 'default', 'job/dead', 0)`,
			`INSERT INTO autocapture_outbox (run_id, sink, seq, op, op_key, created_at) VALUES ($1, 'default', 1, 'open', 'open', 0)`,
		} {
			if _, err := a.db.ExecContext(ctx, q, id); err != nil {
				t.Fatal(err)
			}
		}
		sweep := func() (n int) {
			for _, s := range []*Service{a, b, a, b} {
				got, err := s.out.Sweep(ctx)
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
		if _, err := a.db.ExecContext(ctx, `UPDATE autocapture_threads SET pump_until = 0 WHERE run_id = $1`, id); err != nil {
			t.Fatal(err)
		}
		if n := sweep(); n != 1 {
			t.Fatalf("after that job's lease lapsed, 4 sweeps gave %d jobs, want 1", n)
		}
	})
}
