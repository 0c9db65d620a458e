package executor

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/vocab"
)

func TestRunPlanTierInParallelAndInOrder(t *testing.T) {
	var mu sync.Mutex
	var order []string
	barrier := make(chan struct{})
	var arrived sync.WaitGroup
	arrived.Add(2)
	go func() { arrived.Wait(); close(barrier) }()
	par := func(id string) vocab.Step {
		return fakestep.Func(func(ctx context.Context, in *vocab.Input) (*vocab.Result, error) {
			arrived.Done() // both steps of the tier must be running at once to pass
			select {
			case <-barrier:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			mu.Lock()
			order = append(order, id)
			mu.Unlock()
			return &vocab.Result{Findings: map[string]any{"id": id}}, nil
		})
	}
	var priorSeen []string
	last := fakestep.Func(func(_ context.Context, in *vocab.Input) (*vocab.Result, error) {
		for k := range in.Prior {
			priorSeen = append(priorSeen, k)
		}
		mu.Lock()
		order = append(order, "t3")
		mu.Unlock()
		return &vocab.Result{}, nil
	})
	plan := &playbooks.Plan{Playbook: "pb", Steps: []playbooks.PlannedStep{
		fakestep.Step("t3", vocab.TierProfile, last), fakestep.Step("x", vocab.TierMetrics, par("x")), fakestep.Step("y", vocab.TierMetrics, par("y")),
	}}
	for i := range plan.Steps[1:] {
		plan.Steps[1+i].Timeout = 20 * time.Second
	}
	out := Run(context.Background(), plan, Input{RunID: "r"}, Hooks{})
	if out.Status != "succeeded" {
		t.Fatalf("status %s: %s", out.Status, out.Reason)
	}
	if len(order) != 3 || order[2] != "t3" {
		t.Fatalf("order = %v, want tier 1 steps before the tier-3 step", order)
	}
	if len(priorSeen) != 2 {
		t.Fatalf("tier-3 step saw prior %v, want both tier-1 results", priorSeen)
	}
}

func TestRunPlanSkipsDoneSteps(t *testing.T) {
	c := fakestep.NewCounter()
	next := fakestep.Step("next", vocab.TierTraces, fakestep.OK(c, nil))
	next.When = fakestep.When("steps.first.n == 1")
	plan := &playbooks.Plan{Playbook: "pb", Steps: []playbooks.PlannedStep{fakestep.Step("first", vocab.TierMetrics, fakestep.OK(c, nil)), next}}
	done := map[string]StepRecord{"first": {Plan: "pb", ID: "first", Status: vocab.StatusSucceeded, Findings: map[string]any{"n": 1}}}
	var r recorder
	out := Run(context.Background(), plan, Input{RunID: "r", Done: done}, r.hooks())
	if got := c.Snapshot(); got["r/first"] != 0 || got["r/next"] != 1 {
		t.Fatalf("executions %v: want first skipped (done) and next run once", got)
	}
	if _, again := r.recs["first"]; again {
		t.Error("a step done in an earlier attempt was recorded again")
	}
	if out.Status != "succeeded" || len(out.Steps) != 2 {
		t.Fatalf("outcome %s with %d steps", out.Status, len(out.Steps))
	}
}

func TestRunPlanResolutionCancelsOnlyTier3(t *testing.T) {
	c := fakestep.NewCounter()
	started := make(chan string, 4)
	release := make(chan struct{})
	resolved := make(chan struct{})
	plan := &playbooks.Plan{Playbook: "pb", Steps: []playbooks.PlannedStep{
		fakestep.Step("metrics", vocab.TierMetrics, fakestep.OK(c, nil)),
		fakestep.Step("frame", vocab.TierProfile, fakestep.Block(c, started, release)),
	}}
	var r recorder
	done := make(chan Outcome, 1)
	go func() {
		done <- Run(context.Background(), plan, Input{RunID: "r", Resolved: resolved}, r.hooks())
	}()
	fakestep.WaitFor(t, started, "the tier-3 step to start")
	close(resolved)
	out := fakestep.WaitFor(t, done, "the plan to end")
	if got := r.get("metrics"); got.Status != vocab.StatusSucceeded {
		t.Errorf("tier-1 step %s, want succeeded", got.Status)
	}
	frame := r.get("frame")
	if frame.Status != vocab.StatusCancelled || frame.Error == "" || len(frame.Artifacts) != 1 {
		t.Errorf("tier-3 step = %+v, want cancelled with its cause and its partial artifact kept", frame)
	}
	if out.Status != "partial" {
		t.Errorf("plan %s, want partial (evidence kept, frame cut short)", out.Status)
	}
}

func TestRunPlanCancelAndInterrupt(t *testing.T) {
	cases := []struct {
		name       string
		cause      error
		status     vocab.Status
		recorded   bool
		interrupts bool
	}{
		{name: "cancel request", cause: ErrCancelled, status: "cancelled", recorded: true},
		{name: "interrupted by shutdown", cause: ErrInterrupted, recorded: false, interrupts: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := fakestep.NewCounter()
			started := make(chan string, 1)
			plan := &playbooks.Plan{Playbook: "pb", Steps: []playbooks.PlannedStep{
				fakestep.Step("long", vocab.TierMetrics, fakestep.Block(c, started, nil)),
				fakestep.Step("later", vocab.TierTraces, fakestep.OK(c, nil)),
			}}
			ctx, cancel := context.WithCancelCause(context.Background())
			var r recorder
			done := make(chan Outcome, 1)
			go func() { done <- Run(ctx, plan, Input{RunID: "r"}, r.hooks()) }()
			fakestep.WaitFor(t, started, "the step to start")
			cancel(tc.cause)
			out := fakestep.WaitFor(t, done, "the plan to end")
			if out.Interrupted != tc.interrupts {
				t.Fatalf("interrupted = %v", out.Interrupted)
			}
			if !tc.interrupts && out.Status != tc.status {
				t.Fatalf("status %s, want %s", out.Status, tc.status)
			}
			_, rec := r.recs["long"]
			if rec != tc.recorded {
				t.Fatalf("step recorded = %v, want %v", rec, tc.recorded)
			}
			if c.Count("r/later") != 0 {
				t.Fatal("a later tier ran after the run was stopped")
			}
		})
	}
}
