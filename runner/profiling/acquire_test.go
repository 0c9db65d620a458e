package profiling

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// withProfiling sets the Plane's tier-3 policy.
func withProfiling(p config.Profiling) planeOpt { return func(d *Deps) { d.Config = p } }

func req(target, run, step string) vocab.LeaseRequest {
	return vocab.LeaseRequest{Target: target, RunID: run, Plan: "pb", StepID: step, Hold: 5 * time.Second}
}

// refusal asserts err is a refusal for reason whose detail contains want.
func refusal(t *testing.T, err error, reason, want string) {
	t.Helper()
	var r *vocab.ProfileRefusal
	if !errors.As(err, &r) {
		t.Fatalf("err = %v, want a %s refusal", err, reason)
	}
	if r.Reason != reason || !strings.Contains(r.Detail, want) {
		t.Fatalf("refusal %s %q, want %s containing %q", r.Reason, r.Detail, reason, want)
	}
}

func mustAcquire(t *testing.T, s *Plane, r vocab.LeaseRequest) vocab.ProfileLease {
	t.Helper()
	l, err := s.Acquire(context.Background(), r)
	if err != nil {
		t.Fatalf("acquire %s for %s/%s: %v", r.Target, r.RunID, r.StepID, err)
	}
	return l
}

// TestProfileLeaseLifecycle walks one capture through every state and checks
// what the guard refuses on the way: a busy target, a release while
// recording, the cooldown, and what a stale holder may still do.
func TestProfileLeaseLifecycle(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		s := newPlane(t, db, false, withProfiling(config.Profiling{MaxConcurrent: 2, MaxPerHour: 10}))
		ctx := context.Background()
		const tgt = "http://10.0.0.1:8000"
		l := mustAcquire(t, s, req(tgt+"/", "run-1", "profile"))
		if l.Resumed() != nil {
			t.Fatalf("a fresh lease says it resumed: %+v", l.Resumed())
		}
		_, err := s.Acquire(ctx, req(tgt, "run-2", "profile"))
		refusal(t, err, vocab.RefusedBusy, "run run-1 holds "+tgt)

		rec, err := l.Recording(ctx, 2*time.Second, json.RawMessage(`{"files":["a"]}`))
		if err != nil {
			t.Fatal(err)
		}
		if got := rec.Deadline.Sub(rec.Since); got != 2*time.Second || rec.State != vocab.LeaseRecording || rec.Target != tgt {
			t.Fatalf("recording %+v: want recording on %s for 2s", rec, tgt)
		}
		if _, err := l.Recording(ctx, time.Second, nil); err == nil {
			t.Fatal("a second Recording on one lease succeeded")
		}
		if err := l.Release(ctx); err == nil || !strings.Contains(err.Error(), "the lease is recording") {
			t.Fatalf("release while recording: %v, want it refused", err)
		}
		_, err = s.Acquire(ctx, req(tgt, "run-2", "profile"))
		refusal(t, err, vocab.RefusedBusy, "run run-1 is recording on "+tgt)

		if err := l.Stopping(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := l.Renew(ctx, time.Second); err != nil {
			t.Fatal(err)
		}
		if err := l.Stopped(ctx); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := l.Renew(ctx, time.Second); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("renew after release: %v, want ErrLeaseLost", err)
		}

		withCooldown := req(tgt, "run-2", "profile")
		withCooldown.Cooldown = time.Hour
		_, err = s.Acquire(ctx, withCooldown)
		refusal(t, err, vocab.RefusedCooldown, tgt+" was profiled at")
		other := mustAcquire(t, s, req("http://10.0.0.2:8000", "run-2", "profile")) // the cooldown is per target
		if err := other.Release(ctx); err != nil {
			t.Fatal(err)
		}

		var events []string
		rows, err := s.db.QueryContext(ctx, `SELECT event FROM autocapture_profile_events WHERE run_id = 'run-1' ORDER BY seq`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var e string
			rows.Scan(&e)
			events = append(events, e)
		}
		rows.Close()
		if got, want := strings.Join(events, ","), "acquired,recording,stopping,stopped,released"; got != want {
			t.Errorf("run-1's events %s, want %s", got, want)
		}
	})
}

// TestProfileNotStartedEndsTheLease: a recording whose start never began one
// (404: not armed) ends with NotStarted — the target is free at once, no
// stop is owed, the start still counts for the cooldown — where Release is
// refused; NotStarted is refused on a lease that is not recording.
func TestProfileNotStartedEndsTheLease(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		s := newPlane(t, db, false, withProfiling(config.Profiling{MaxConcurrent: 1, MaxPerHour: 10}))
		ctx := context.Background()
		const tgt = "http://10.0.0.3:8000"
		l := mustAcquire(t, s, req(tgt, "run-1", "profile"))
		if err := l.NotStarted(ctx, "not armed"); err == nil {
			t.Fatal("NotStarted on a held lease succeeded")
		}
		if _, err := l.Recording(ctx, time.Minute, nil); err != nil {
			t.Fatal(err)
		}
		if err := l.NotStarted(ctx, "start_profile answered 404"); err != nil {
			t.Fatal(err)
		}
		if st := leaseState(t, s, tgt); st != "" {
			t.Errorf("lease state %q after NotStarted, want none", st)
		}
		if events := runEvents(t, s, "run-1"); !strings.Contains(events, "recording,not_started") {
			t.Errorf("events %s: want recording then not_started", events)
		}
		next := mustAcquire(t, s, req(tgt, "run-2", "profile")) // free at once: budget 1 not held
		withCooldown := req("http://10.0.0.4:8000", "run-3", "profile")
		_, err := s.Acquire(ctx, withCooldown)
		refusal(t, err, vocab.RefusedBudget, "")
		if err := next.Release(ctx); err != nil {
			t.Fatal(err)
		}
		cool := req(tgt, "run-3", "profile")
		cool.Cooldown = time.Hour
		_, err = s.Acquire(ctx, cool)
		refusal(t, err, vocab.RefusedCooldown, "")
	})
}

// TestProfileResumedStepGetsItsLease: the same run, plan and step on another
// replica gets the lease back with what was recorded, and the earlier holder
// can change nothing more.
func TestProfileResumedStepGetsItsLease(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		a := newPlane(t, db, false)
		b := newPlane(t, db, false)
		ctx := context.Background()
		const tgt = "http://10.0.0.1:8000"
		first := mustAcquire(t, a, req(tgt, "run-1", "profile"))
		rec, err := first.Recording(ctx, 30*time.Second, json.RawMessage(`{"before":["x.json.gz"]}`))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.PauseProfiling(ctx, "oncall", "bad deploy"); err != nil {
			t.Fatal(err)
		}
		// Paused, but a resumed step must be able to stop what it started.
		again := mustAcquire(t, b, req(tgt, "run-1", "profile"))
		got := again.Resumed()
		if got == nil || got.State != vocab.LeaseRecording || !got.Deadline.Equal(rec.Deadline) ||
			string(got.Saved) != `{"before":["x.json.gz"]}` {
			t.Fatalf("resumed %+v, want the recording %+v with its saved listing", got, rec)
		}
		if err := first.Stopping(ctx, time.Minute); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("the earlier holder's Stopping: %v, want ErrLeaseLost", err)
		}
		if err := first.Release(ctx); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("the earlier holder's Release: %v, want ErrLeaseLost", err)
		}
		if err := again.Stopping(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := again.Stopped(ctx); err != nil {
			t.Fatal(err)
		}
		if err := again.Release(ctx); err != nil {
			t.Fatal(err)
		}
		_, err = b.Acquire(ctx, req(tgt, "run-2", "profile"))
		refusal(t, err, vocab.RefusedPaused, "paused by oncall at ")
		refusal(t, err, vocab.RefusedPaused, ": bad deploy")
		if _, err := a.ResumeProfiling(ctx, "oncall"); err != nil {
			t.Fatal(err)
		}
		l := mustAcquire(t, a, req(tgt, "run-2", "profile"))
		if l.Resumed() != nil {
			t.Fatalf("another run's step resumed %+v", l.Resumed())
		}
	})
}

// TestProfileBudget: max_concurrent counts every target held (a stop that
// failed too), max_per_hour counts starts and leases about to start.
func TestProfileBudget(t *testing.T) {
	s := newPlane(t, testenv.DB{Path: t.TempDir() + "/a.db"}, false,
		withProfiling(config.Profiling{MaxConcurrent: 2, MaxPerHour: 3}))
	ctx := context.Background()
	l1 := mustAcquire(t, s, req("http://h1:1", "r1", "p"))
	l2 := mustAcquire(t, s, req("http://h2:1", "r2", "p"))
	_, err := s.Acquire(ctx, req("http://h3:1", "r3", "p"))
	refusal(t, err, vocab.RefusedBudget, "2 of profiling.max_concurrent 2")
	for _, l := range []vocab.ProfileLease{l1, l2} {
		if _, err := l.Recording(ctx, time.Second, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := l1.StopFailed(ctx, "stop hung"); err != nil {
		t.Fatal(err)
	}
	if err := l1.Release(ctx); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("release after StopFailed: %v, want ErrLeaseLost (the sweeper's now)", err)
	}
	_, err = s.Acquire(ctx, req("http://h3:1", "r3", "p"))
	refusal(t, err, vocab.RefusedBudget, "max_concurrent") // the failed stop still counts
	_, err = s.Acquire(ctx, req("http://h1:1", "r3", "p"))
	refusal(t, err, vocab.RefusedBusy, "stop hung")
	if err := l2.Stopped(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l3 := mustAcquire(t, s, req("http://h3:1", "r3", "p")) // 2 started + this one about to = 3
	_ = l3
	if _, err := s.ClearProfileLease(ctx, "http://h1:1", "oncall"); err != nil {
		t.Fatal(err)
	}
	_, err = s.Acquire(ctx, req("http://h4:1", "r4", "p"))
	refusal(t, err, vocab.RefusedBudget, "2 captures started in the last hour and 1 about to: profiling.max_per_hour is 3")
	st, err := s.ProfilingStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Budget != (runs.ProfileBudget{Active: 1, MaxConcurrent: 2, StartsLastHour: 2, MaxPerHour: 3}) ||
		len(st.Leases) != 1 || st.Leases[0].Target != "http://h3:1" || st.Leases[0].State != vocab.LeaseHeld {
		t.Fatalf("status %+v", st)
	}
}

// TestProfileAcquireConcurrentPostgres: two replicas on one PostgreSQL, ten
// rounds of Acquires racing for one target and for the fleet budget: never
// two winners for one target, never more than max_concurrent in all.
func TestProfileAcquireConcurrentPostgres(t *testing.T) {
	db := testenv.DB{URL: testenv.StartPostgres(t)}
	p := config.Profiling{MaxConcurrent: 2, MaxPerHour: 1000}
	svcs := []*Plane{newPlane(t, db, false, withProfiling(p)), newPlane(t, db, false, withProfiling(p))}
	ctx := context.Background()
	for round := range 10 {
		var mu sync.Mutex
		var won []vocab.ProfileLease
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				target := "http://same:8000"
				if i%2 == 1 { // half race for the one target, half for the budget
					target = "http://other-" + string(rune('a'+i)) + ":8000"
				}
				l, err := svcs[i%2].Acquire(ctx, req(target, "r"+string(rune('a'+i)), "p"))
				var r *vocab.ProfileRefusal
				switch {
				case err == nil:
					mu.Lock()
					won = append(won, l)
					mu.Unlock()
				case !errors.As(err, &r):
					t.Errorf("round %d: acquire: %v", round, err)
				}
			}()
		}
		wg.Wait()
		targets := map[string]bool{}
		for _, l := range won {
			tg := l.(*profileLease).target
			if targets[tg] {
				t.Fatalf("round %d: two leases on %s", round, tg)
			}
			targets[tg] = true
		}
		if len(won) != p.MaxConcurrent {
			t.Fatalf("round %d: %d leases won, want exactly max_concurrent %d", round, len(won), p.MaxConcurrent)
		}
		for _, l := range won {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
}
