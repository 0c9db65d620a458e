package outbox

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestRunNeverWaitsForTheNotifier: with a notifier that answers nothing, a
// run's whole thread is still recorded (every Append returns); once it
// answers, the whole thread arrives, in order, each operation once.
func TestRunNeverWaitsForTheNotifier(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		s := newSink()
		s.gate = make(chan struct{})
		h := newHarness(t, db, s, true)
		h.recordThread(t, "run-1")
		if keys, _ := s.thread("run-1"); len(keys) != 0 {
			t.Fatalf("delivered %v through a closed gate", keys)
		}
		close(s.gate)
		s.waitFor(t, "run-1", keyFinished)
		checkThread(t, s, "run-1", wantThread...)
	})
}

// TestVerdictOvertakesQueuedReplies: while the notifier is stuck, the run's
// whole thread queues; once it answers, the parent's verdict edit goes right
// after the parent, ahead of the three step replies recorded before it, and
// the end still comes last. (Before, the verdict waited behind every earlier
// reply: in a busy channel paced at 1 post/s that was minutes.)
func TestVerdictOvertakesQueuedReplies(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		s := newSink()
		s.gate = make(chan struct{})
		h := newHarness(t, db, s, true)
		h.recordThread(t, "run-1")
		close(s.gate)
		s.waitFor(t, "run-1", keyFinished)
		checkThread(t, s, "run-1", wantThread...)
		keys, _ := s.thread("run-1")
		if idx(keys, keyVerdict) != 1 {
			t.Fatalf("thread %v: the verdict edit must come right after the parent", keys)
		}
		if a, b, tri := idx(keys, stepKey("pb", "a")), idx(keys, stepKey("pb", "b")), idx(keys, stepKey("pb", "tri")); max(a, b) > tri {
			t.Errorf("thread %v: the step replies must keep their recorded order (tri after a and b)", keys)
		}
	})
}

// TestVerdictGoesBesideAPacedReply: while the first step's reply waits 2 s
// for the channel's pace (the thread held by its deliverer), the verdict is
// recorded; its edit of the parent is delivered beside that reply, before
// it lands, not after it and the other queued one.
func TestVerdictGoesBesideAPacedReply(t *testing.T) {
	t.Parallel()
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		s := newSink()
		paced := make(chan struct{})
		var once sync.Once
		s.hold = func(ctx context.Context, key string) error {
			if !strings.HasPrefix(key, "step/") {
				return nil
			}
			once.Do(func() { close(paced) })
			select {
			case <-time.After(2 * time.Second):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		h := newHarness(t, db, s, true)
		h.record(t, "run-1", Open{})
		h.record(t, "run-1", StepReply{Plan: "pb", Step: "a"})
		waitClosed(t, sinkGuard, "the first reply to wait for the pace", paced)
		h.record(t, "run-1", StepReply{Plan: "pb", Step: "tri"}, VerdictEdit{})
		h.record(t, "run-1", Finished{})
		s.waitFor(t, "run-1", keyFinished)
		checkThread(t, s, "run-1", keyOpen, stepKey("pb", "a"), stepKey("pb", "tri"), keyVerdict, keyFinished)
		keys, _ := s.thread("run-1")
		if idx(keys, keyVerdict) != 1 {
			t.Fatalf("thread %v: the verdict edit must land right after the parent, beside the paced reply", keys)
		}
	})
}

// TestThreadSurvivesUncertainFailures: every operation's first attempt takes
// effect and then fails (a dropped connection): the retry looks it up and
// posts nothing twice; the thread stays in order.
func TestThreadSurvivesUncertainFailures(t *testing.T) {
	t.Parallel()
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		s := newSink()
		s.fail = func(_ string, call int) string {
			if call == 1 {
				return "drop"
			}
			return ""
		}
		h := newHarness(t, db, s, true)
		start := time.Now()
		h.recordThread(t, "run-1")
		s.waitFor(t, "run-1", keyFinished)
		// The last drop's retry comes after its backoff (1 s).
		waitUntil(t, sinkGuard, "one retry flagged per operation", func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.retries >= len(wantThread)
		})
		t.Logf("%d operations, each dropped once and retried after its backoff, delivered in %s",
			len(wantThread), time.Since(start).Round(time.Millisecond))
		time.Sleep(200 * time.Millisecond) // a retry too many would be flagged by now
		checkThread(t, s, "run-1", wantThread...)
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.retries != len(wantThread) {
			t.Errorf("%d retries flagged, want one per operation (%d)", s.retries, len(wantThread))
		}
	})
}

// TestRateLimitIsWaitedOut: a 429 on a reply holds the thread for its
// Retry-After; nothing is lost or doubled, and the retry comes no sooner.
func TestRateLimitIsWaitedOut(t *testing.T) {
	t.Parallel()
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		s := newSink()
		limited := stepKey("pb", "a")
		s.fail = func(key string, call int) string {
			if key == limited && call <= 2 {
				return "429"
			}
			return ""
		}
		h := newHarness(t, db, s, true)
		h.recordThread(t, "run-1")
		s.waitFor(t, "run-1", keyFinished)
		checkThread(t, s, "run-1", wantThread...)
		s.mu.Lock()
		at := s.at[limited]
		s.mu.Unlock()
		if len(at) != 3 {
			t.Fatalf("%d attempts of the limited reply, want 3", len(at))
		}
		for i := 1; i < len(at); i++ {
			if gap := at[i].Sub(at[i-1]); gap < 650*time.Millisecond {
				t.Errorf("attempt %d came %s after a 429 asking for 700ms", i+1, gap)
			}
		}
		if v := testutil.ToFloat64(h.out.m.failed.WithLabelValues("default", "rate_limited")); v != 2 {
			t.Errorf("failures{reason=rate_limited} = %v, want 2", v)
		}
	})
}

// TestTwoReplicasOneThread: two processes on one store, both delivering:
// each operation of five threads reaches its thread once, in order.
func TestTwoReplicasOneThread(t *testing.T) {
	t.Parallel()
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		s := newSink()
		a := newHarness(t, db, s, true)
		newHarness(t, db, s, true)
		var ids []string
		for i := range 5 {
			id := fmt.Sprintf("run-%d", i)
			a.recordThread(t, id)
			ids = append(ids, id)
		}
		for _, id := range ids {
			s.waitFor(t, id, keyFinished)
		}
		time.Sleep(300 * time.Millisecond)
		for _, id := range ids {
			checkThread(t, s, id, wantThread...)
		}
	})
}

// TestOpenCarriesItsChannel: the channel an Open records (the playbook's or
// the routing label's) reaches the notifier with the parent; an Open without
// one leaves the notifier's default.
func TestOpenCarriesItsChannel(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		s := newSink()
		h := newHarness(t, db, s, true)
		h.record(t, "run-1", Open{Channel: "C0VLLMTEAM"})
		h.record(t, "run-2", Open{})
		s.waitFor(t, "run-1", keyOpen)
		s.waitFor(t, "run-2", keyOpen)
		s.mu.Lock()
		defer s.mu.Unlock()
		if got := s.opened["run-1"].Channel; got != "C0VLLMTEAM" {
			t.Errorf("parent opened with channel %q, want the playbook's C0VLLMTEAM", got)
		}
		if got := s.opened["run-2"].Channel; got != "" {
			t.Errorf("parent without a channel opened in %q", got)
		}
	})
}
