package lifecycle

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"
	"github.com/riverqueue/river/rivertype"

	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// TestResumedRunWaitsForPlaybookSlot: run a of a max_concurrent 1 playbook is
// resumed after its owner crashed; meanwhile run b took the playbook's only
// slot. Resuming a must wait for b (snooze, nothing run, no attempt used), then
// run once b is done.
func TestResumedRunWaitsForPlaybookSlot(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		ctx := context.Background()
		c := fakestep.NewCounter()
		started := make(chan string, 4)
		release := make(chan struct{})
		p := fakePlanner{Plans: func(template.Alert) []*playbooks.Plan {
			pl := plan("profile-once", fakestep.Step("hold", vocab.TierMetrics, fakestep.Block(c, started, release)))
			pl.MaxConcurrent = 1
			return []*playbooks.Plan{pl}
		}}
		s1 := newProc(t, db, p, true)
		a := acceptOne(t, s1, firing("a", time.Now().UTC())).RunID
		fakestep.WaitFor(t, started, "run a to start")
		s1.abandon()
		// s2's workers are driven by hand below: no River, so no race for the jobs.
		s2 := newProc(t, db, p, false)
		if _, err := s2.db.ExecContext(ctx, `UPDATE autocapture_runs SET lease_until = 0 WHERE id = $1`, a); err != nil {
			t.Fatal(err) // a's lease expired now rather than in lease_timeout
		}
		if n, err := s2.ReapOnce(ctx); err != nil || n != 1 {
			t.Fatalf("reaper took %d runs (%v), want a", n, err)
		}
		b := acceptOne(t, s2, firing("b", time.Now().UTC())).RunID
		bDone := make(chan error, 1)
		go func() { bDone <- s2.Work(ctx, RunJob{RunID: b}) }()
		if got := fakestep.WaitFor(t, started, "run b to start"); got != b+"/hold" {
			t.Fatalf("%s started, want b's step", got)
		}
		aDone := make(chan error, 1)
		go func() { aDone <- s2.Work(ctx, RunJob{RunID: a, Generation: 1}) }()
		var snooze *rivertype.JobSnoozeError
		select {
		case got := <-started:
			close(release)
			t.Fatalf("%s started while run b held the playbook's only slot", got)
		case err := <-aDone:
			if !errors.As(err, &snooze) {
				t.Fatalf("resumed run a: work returned %v, want a snooze", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("work on resumed run a did not return")
		}
		r, err := s2.Get(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		if owner := leaseOf(t, s2, a).owner; owner.Valid || r.Status != vocab.StatusQueued || r.Attempts != 1 {
			t.Fatalf("waiting run a: owner %v status %s attempts %d; want unowned, queued, the wait not counted", owner, r.Status, r.Attempts)
		}
		close(release)
		if err := <-bDone; err != nil {
			t.Fatalf("run b: %v", err)
		}
		if err := s2.Work(ctx, RunJob{RunID: a, Generation: 1}); err != nil {
			t.Fatalf("run a after b: %v", err)
		}
		if r, _ := s2.Get(ctx, a); r.Status != vocab.StatusSucceeded || c.Count(a+"/hold") != 2 {
			t.Fatalf("run a %s (%s), hold ran %d times; want succeeded, once per process", r.Status, r.Reason, c.Count(a+"/hold"))
		}
		if m := c.MaxSeen(); m != 1 {
			t.Fatalf("%d runs of a max_concurrent 1 playbook at once", m)
		}
	})
}

// TestCooldownsOneOfConcurrentRuns: two runs on two replicas reach the same
// cooldown at once, the playbook's or a step's; exactly one passes it, the
// other is skipped naming the run that holds the cooldown.
func TestCooldownsOneOfConcurrentRuns(t *testing.T) {
	const key = "snap/127.0.0.1:8000"
	cases := []struct {
		name  string
		scope func(p *playbooks.Plan)
		// skipped says, of the run that lost, that it was skipped by the other.
		skipped func(r *runs.Run, winner string) bool
	}{
		{"playbook", func(p *playbooks.Plan) { p.Cooldown, p.CooldownKey = time.Hour, key },
			func(r *runs.Run, winner string) bool {
				return r.Status == vocab.StatusSkipped && strings.Contains(r.Reason, "cooldown: playbook pb ran for run "+winner)
			}},
		{"step", func(p *playbooks.Plan) { p.Steps[0].Cooldown, p.Steps[0].CooldownKey = time.Hour, key },
			func(r *runs.Run, winner string) bool {
				st := stepByID(r, "snap")
				return st.Status == vocab.StatusSkipped && strings.Contains(st.Reason, "cooldown: step snap ran for run "+winner)
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
				c := fakestep.NewCounter()
				started := make(chan string, 2)
				release := make(chan struct{})
				p := fakePlanner{Plans: func(template.Alert) []*playbooks.Plan {
					pl := plan("pb", fakestep.Step("snap", vocab.TierMetrics, fakestep.Block(c, started, release)))
					tc.scope(pl)
					return []*playbooks.Plan{pl}
				}}
				s1, s2 := newProc(t, db, p, true), newProc(t, db, p, true)
				x := acceptOne(t, s1, firing("x", time.Now().UTC())).RunID
				y := acceptOne(t, s2, firing("y", time.Now().UTC())).RunID
				winner := strings.TrimSuffix(fakestep.WaitFor(t, started, "one run to pass the cooldown"), "/snap")
				loser := map[string]string{x: y, y: x}[winner]
				// The winner's step holds on: the loser decides while it runs.
				deadline := time.Now().Add(30 * time.Second)
				for {
					select {
					case got := <-started:
						close(release)
						t.Fatalf("%s passed the cooldown too, while %s held it", got, winner)
					default:
					}
					if r, _ := s1.Get(context.Background(), loser); r != nil && isFinished(r) {
						if !tc.skipped(r, winner) {
							t.Errorf("losing run %s (%s), steps %+v; want skipped by the cooldown of %s", r.Status, r.Reason, r.Steps, winner)
						}
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("run %s never finished", loser)
					}
					time.Sleep(20 * time.Millisecond)
				}
				close(release)
				if r := waitRun(t, s1, winner, "finished", isFinished); r.Status != vocab.StatusSucceeded {
					t.Fatalf("winning run %s (%s)", r.Status, r.Reason)
				}
				if n := c.Count(winner+"/snap") + c.Count(loser+"/snap"); n != 1 {
					t.Fatalf("step ran %d times across both runs, want once", n)
				}
			})
		})
	}
}

// TestFailedStepGivesItsCooldownBack: a step whose cooldown a run took but
// which failed does not hold the cooldown; the next run runs it.
func TestFailedStepGivesItsCooldownBack(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		c := fakestep.NewCounter()
		var fail atomic.Bool
		fail.Store(true)
		p := fakePlanner{Plans: func(template.Alert) []*playbooks.Plan {
			step := fakestep.OK(c, nil)
			if fail.Load() {
				step = fakestep.Fail(c, errors.New("scrape refused"))
			}
			pl := plan("pb", fakestep.Step("snap", vocab.TierMetrics, step))
			pl.Steps[0].Cooldown, pl.Steps[0].CooldownKey = time.Hour, "snap/127.0.0.1:8000"
			return []*playbooks.Plan{pl}
		}}
		s := newProc(t, db, p, true)
		first := acceptOne(t, s, firing("x", time.Now().UTC())).RunID
		if r := waitRun(t, s, first, "finished", isFinished); stepByID(r, "snap").Status != "failed" {
			t.Fatalf("first run's step %+v, want failed", stepByID(r, "snap"))
		}
		fail.Store(false) // the planner is called again only for the second run
		second := acceptOne(t, s, firing("y", time.Now().UTC())).RunID
		r := waitRun(t, s, second, "finished", isFinished)
		if st := stepByID(r, "snap"); st.Status != vocab.StatusSucceeded || c.Count(second+"/snap") != 1 {
			t.Fatalf("second run's step %s (%s), ran %d times; want it run and succeeded", st.Status, st.Reason, c.Count(second+"/snap"))
		}
	})
}
