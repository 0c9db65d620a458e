package lifecycle

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/outbox"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// threeTierPlanner: "a" (tier 1) succeeds, "b" (tier 2) is middle, "c" (tier 3)
// succeeds; every execution is counted in c.
func threeTierPlanner(c *fakestep.Counter, middle vocab.Step) fakePlanner {
	return planner(
		func() playbooks.PlannedStep { return fakestep.Step("a", vocab.TierMetrics, fakestep.OK(c, nil)) },
		func() playbooks.PlannedStep { return fakestep.Step("b", vocab.TierTraces, middle) },
		func() playbooks.PlannedStep { return fakestep.Step("c", vocab.TierProfile, fakestep.OK(c, nil)) },
	)
}

func TestCrashRecoveryResumesAfterLastStep(t *testing.T) {
	t.Parallel()
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		first, second := fakestep.NewCounter(), fakestep.NewCounter()
		started := make(chan string, 1)
		s1 := newProc(t, db, threeTierPlanner(first, fakestep.Block(first, started, nil)), true, withReplica("r0"))
		id := acceptOne(t, s1, firing("fp", time.Now().UTC())).RunID
		fakestep.WaitFor(t, started, "step b to start on the first process")
		waitRun(t, s1, id, "step a persisted", func(r *runs.Run) bool { return stepByID(r, "a").Status == vocab.StatusSucceeded })

		s1.abandon()
		crashed := time.Now()
		s2 := newProc(t, db, threeTierPlanner(second, fakestep.OK(second, nil)), true, withReplica("r1"))
		r := waitRun(t, s2, id, "finished", isFinished)
		t.Logf("recovery: crash to resumed run finished in %s (lease_timeout %s)", time.Since(crashed), fastRuns().LeaseTimeout)

		if r.Status != vocab.StatusSucceeded || r.Resumed != 1 || r.Attempts != 2 {
			t.Fatalf("run %s resumed=%d attempts=%d (%s), want succeeded, resumed 1, attempts 2", r.Status, r.Resumed, r.Attempts, r.Reason)
		}
		if got := second.Snapshot(); len(got) != 2 || got[id+"/b"] != 1 || got[id+"/c"] != 1 {
			t.Fatalf("second process executed %v, want exactly b and c once (a was persisted)", got)
		}
		if first.Count(id+"/a") != 1 {
			t.Fatalf("first process ran a %d times", first.Count(id+"/a"))
		}
		// One thread across both processes: opened once, the resume said once,
		// naming the replica that goes on and the one that held it, one end.
		s2.out.eventually(t, id, outbox.Finished{}.Key())
		ops := s2.out.ops(t, id)
		if n := s2.out.count(t, id, outbox.Open{}.Key()); n != 1 {
			t.Fatalf("thread opened %d times, want once across both processes: %v", n, ops)
		}
		resumed := outbox.Resumed{N: 1}.Key()
		if !hasOp(ops, "outbox.Resumed{N:1 From:"+s1.Owner()+" On:}") || !hasOp(ops, "outbox.Resumed{N:1 From: On:"+s2.Owner()+"}") ||
			!strings.HasPrefix(s1.Owner(), "r0/") || !strings.HasPrefix(s2.Owner(), "r1/") {
			t.Fatalf("thread %v: want the resume from r0's %s, claimed by r1's %s", ops, s1.Owner(), s2.Owner())
		}
		if n := s2.out.count(t, id, outbox.Finished{}.Key()); n != 1 {
			t.Fatalf("thread %v: %d ends, want one", ops, n)
		}
		keys := map[string]bool{}
		for _, o := range ops {
			keys[o.key] = true
		}
		if !keys[resumed] || keys[outbox.Resumed{N: 2}.Key()] {
			t.Fatalf("thread %v: want exactly one resume", ops)
		}
		if want := fmt.Sprintf("%s 1 %s", id, s2.Owner()); !slices.Contains(s2.out.claims(), want) {
			t.Fatalf("resume's claims %q, want %q", s2.out.claims(), want)
		}
	})
}

func TestNeverTwiceAtOnce(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		c := fakestep.NewCounter()
		var mu sync.Mutex
		running := map[string]bool{}
		overlap := ""
		sleepy := func() vocab.Step {
			return fakestep.Func(func(ctx context.Context, in *vocab.Input) (*vocab.Result, error) {
				key := in.RunID + "/" + in.StepID
				mu.Lock()
				if running[key] {
					overlap = key
				}
				running[key] = true
				mu.Unlock()
				defer c.Enter(key)()
				time.Sleep(time.Duration(5+rand.IntN(30)) * time.Millisecond)
				mu.Lock()
				running[key] = false
				mu.Unlock()
				return &vocab.Result{}, nil
			})
		}
		p := planner(
			func() playbooks.PlannedStep { return fakestep.Step("m1", vocab.TierMetrics, sleepy()) },
			func() playbooks.PlannedStep { return fakestep.Step("m2", vocab.TierMetrics, sleepy()) },
			func() playbooks.PlannedStep { return fakestep.Step("t", vocab.TierTraces, sleepy()) },
		)
		// A lease far longer than any stall of this loaded test machine: a
		// takeover here would be a (correct) resume, not what this test is about.
		longLease := func(o *procOpts) { o.cfg.LeaseTimeout = 5 * time.Second }
		s1 := newProc(t, db, p, true, longLease)
		s2 := newProc(t, db, p, true, longLease)
		const runs = 12
		var alerts []template.Alert
		for i := range runs {
			alerts = append(alerts, firing(fmt.Sprintf("fp%d", i), time.Now().UTC()))
		}
		acc, err := s1.Accept(context.Background(), alerts[:runs/2])
		if err != nil {
			t.Fatal(err)
		}
		acc2, err := s2.Accept(context.Background(), alerts[runs/2:])
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range append(acc, acc2...) {
			if r := waitRun(t, s1, a.RunID, "finished", isFinished); r.Status != vocab.StatusSucceeded {
				t.Fatalf("run %s: %s (%s)", r.ID, r.Status, r.Reason)
			}
		}
		got := c.Snapshot()
		if len(got) != runs*3 {
			t.Fatalf("%d distinct steps executed, want %d", len(got), runs*3)
		}
		for k, v := range got {
			if v != 1 {
				t.Errorf("step %s executed %d times", k, v)
			}
		}
		if overlap != "" {
			t.Errorf("step %s ran twice at once", overlap)
		}
	})
}

func TestAttemptsExhausted(t *testing.T) {
	t.Parallel()
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		c := fakestep.NewCounter()
		started := make(chan string, 1)
		oneAttempt := func(o *procOpts) { o.cfg.MaxAttempts = 1 }
		s1 := newProc(t, db, threeTierPlanner(c, fakestep.Block(c, started, nil)), true, oneAttempt)
		id := acceptOne(t, s1, firing("fp", time.Now().UTC())).RunID
		fakestep.WaitFor(t, started, "step b to start")
		s1.abandon()
		s2 := newProc(t, db, threeTierPlanner(c, fakestep.OK(c, nil)), true, oneAttempt)
		r := waitRun(t, s2, id, "finished", isFinished)
		if r.Status != vocab.StatusFailed || !strings.Contains(r.Reason, "gave up after 1 attempts") {
			t.Fatalf("run %s (%q), want failed with the reason", r.Status, r.Reason)
		}
		if c.Count(id+"/c") != 0 {
			t.Fatal("a run past max_attempts ran a step")
		}
	})
}

func TestGracefulStopResumesInNextProcess(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		c := fakestep.NewCounter()
		started := make(chan string, 1)
		s1 := newProc(t, db, threeTierPlanner(c, fakestep.Block(c, started, nil)), true)
		id := acceptOne(t, s1, firing("fp", time.Now().UTC())).RunID
		fakestep.WaitFor(t, started, "step b to start")
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := s1.Stop(ctx); err != nil {
			t.Fatalf("stop: %v", err)
		}
		r, err := s1.Get(context.Background(), id)
		if err != nil || r.FinishedAt != nil || stepByID(r, "b").Status != "" {
			t.Fatalf("after stop: %+v, %v; want unfinished, b unrecorded", r, err)
		}
		s2 := newProc(t, db, threeTierPlanner(c, fakestep.OK(c, nil)), true)
		r = waitRun(t, s2, id, "finished", isFinished)
		if r.Status != vocab.StatusSucceeded || r.Resumed != 1 || r.Attempts != 1 {
			t.Fatalf("run %s resumed=%d attempts=%d, want succeeded, resumed 1, the shutdown not counted as an attempt",
				r.Status, r.Resumed, r.Attempts)
		}
		if c.Count(id+"/a") != 1 || c.Count(id+"/c") != 1 {
			t.Fatalf("executions %v", c.Snapshot())
		}
	})
}
