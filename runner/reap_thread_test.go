package runner

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"

	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/runner/outbox"
	"github.com/autocapture/autocapture/vocab"
)

// TestEveryResumeReachesTheThread: a run whose resumed job is lost before it
// claims the run (its replica died between River's fetch and the claim) is
// resumed again by the reaper; each resume is in the thread, as the run's
// resumed counter says, though no attempt ran between them to record it.
// (Found by TestServeChaos: threads with run/resumed/2 and no run/resumed/1.)
func TestEveryResumeReachesTheThread(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		f := newFarSide()
		a := newService(t, db, threeSteps(fakestep.NewCounter()), true, notifyTo(f))
		ctx := context.Background()
		id := acceptOne(t, a, firing("fp-resumes", time.Now().UTC())).RunID
		waitRun(t, a, id, "finished", isFinished)
		if err := a.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		// Not started: this Service's reaper is driven by hand, no worker
		// claims the resumed run in between.
		s := newService(t, db, threeSteps(fakestep.NewCounter()), false, notifyTo(f))
		for gen := range 2 {
			// The run as a dead owner leaves it: running, its lease expired.
			if _, err := s.db.ExecContext(ctx, `UPDATE autocapture_runs SET status = $1, finished_at = NULL, owner = 'dead/1/x',
				lease_until = 0 WHERE id = $2`, vocab.StatusRunning, id); err != nil {
				t.Fatal(err)
			}
			if n, err := s.life.ReapOnce(ctx); err != nil || n != 1 {
				t.Fatalf("resume %d: reaper took %d runs (%v), want 1", gen+1, n, err)
			}
		}
		rows, err := s.db.QueryContext(ctx, `SELECT op_key FROM autocapture_outbox WHERE run_id = $1 ORDER BY seq`, id)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var keys []string
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, k)
		}
		got := strings.Join(keys, " ")
		for _, want := range []string{"run/resumed/1", "run/resumed/2"} {
			if strings.Count(got, want) != 1 {
				t.Errorf("outbox %v: want %s once", keys, want)
			}
		}
	})
}

// TestResumesBeforeTheThreadReachIt: a run interrupted twice before its
// plans (and its thread's parent) were stored — its resumes recorded no
// reply, there was no thread yet — says both in its thread once an attempt
// opens it, in order, before the run's own steps end it. (Found by
// TestServeChaos on a loaded machine: threads starting at run/resumed/2.)
func TestResumesBeforeTheThreadReachIt(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		f := newFarSide()
		ctx := context.Background()
		// Not started: the reaper is driven by hand, nothing claims the run.
		s := newService(t, db, threeSteps(fakestep.NewCounter()), false, notifyTo(f))
		id := acceptOne(t, s, firing("fp-early", time.Now().UTC())).RunID
		for gen := range 2 {
			// As an attempt interrupted before its plans were stored leaves it.
			if _, err := s.db.ExecContext(ctx, `UPDATE autocapture_runs SET status = $1, owner = 'r0/1/dead',
				lease_until = 0 WHERE id = $2`, vocab.StatusRunning, id); err != nil {
				t.Fatal(err)
			}
			if n, err := s.life.ReapOnce(ctx); err != nil || n != 1 {
				t.Fatalf("resume %d: reaper took %d runs (%v), want 1", gen+1, n, err)
			}
		}
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		waitRun(t, s, id, "finished", isFinished)
		f.waitFor(t, id, keyFinished)
		keys, doubled := f.thread(id)
		one, two := idx(keys, "run/resumed/1"), idx(keys, "run/resumed/2")
		if one < 0 || two < one || len(doubled) > 0 || keys[0] != keyOpen {
			t.Errorf("thread %v (doubled %v): want the parent, then run/resumed/1 and run/resumed/2 once each, in order", keys, doubled)
		}
	})
}

// TestAResumeWaitingForItsClaimCountsNoAttempt: a resume's reply waits until
// a replica claims the run (to name it); those waits send nothing, so they
// count no attempt: counted, they made the reply's first real failure (Slack
// down) back off as if it had failed many times, and flagged it uncertain.
func TestAResumeWaitingForItsClaimCountsNoAttempt(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		f := newFarSide()
		ctx := context.Background()
		a := newService(t, db, threeSteps(fakestep.NewCounter()), true, notifyTo(f))
		id := acceptOne(t, a, firing("fp-claim", time.Now().UTC())).RunID
		waitRun(t, a, id, "finished", isFinished)
		f.waitFor(t, id, keyFinished)
		if err := a.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		// Not started: nothing claims the resumed run; its thread is delivered by hand.
		s := newService(t, db, threeSteps(fakestep.NewCounter()), false, notifyTo(f))
		if _, err := s.db.ExecContext(ctx, `UPDATE autocapture_runs SET status = $1, finished_at = NULL, owner = 'r0/1/dead',
			lease_until = 0 WHERE id = $2`, vocab.StatusRunning, id); err != nil {
			t.Fatal(err)
		}
		if n, err := s.life.ReapOnce(ctx); err != nil || n != 1 {
			t.Fatalf("reaper took %d runs (%v), want 1", n, err)
		}
		for range 3 {
			var snooze *river.JobSnoozeError
			if err := s.out.Pump(ctx, outbox.Args{RunID: id, Sink: "default"}, "job/by-hand"); !errors.As(err, &snooze) {
				t.Fatalf("delivering the unclaimed resume's reply: %v, want a snooze until a replica claims the run", err)
			}
		}
		var attempts int
		if err := s.db.QueryRowContext(ctx, `SELECT attempts FROM autocapture_outbox WHERE run_id = $1 AND op_key = $2`,
			id, "run/resumed/1").Scan(&attempts); err != nil {
			t.Fatal(err)
		}
		if keys, _ := f.thread(id); attempts != 0 || idx(keys, "run/resumed/1") >= 0 {
			t.Errorf("after 3 waits for the claim: %d attempts counted, thread %v; want none, the reply not sent", attempts, keys)
		}
	})
}
