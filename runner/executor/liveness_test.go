package executor

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/vocab"
)

// deaf is a step that ignores its context: it returns only when release closes.
func deaf(started chan<- struct{}, release <-chan struct{}) vocab.Step {
	return fakestep.Func(func(context.Context, *vocab.Input) (*vocab.Result, error) {
		close(started)
		<-release
		return &vocab.Result{Summary: "late"}, nil
	})
}

// gauge records Hooks.Abandoned calls per kind.
type gauge struct {
	mu    sync.Mutex
	calls []int
	now   map[string]int
}

func (g *gauge) add(kind string, d int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.now == nil {
		g.now = map[string]int{}
	}
	g.now[kind] += d
	g.calls = append(g.calls, d)
}

func (g *gauge) get(kind string) (int, []int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.now[kind], append([]int(nil), g.calls...)
}

// runAsync runs the plan in the background; the channel yields its outcome.
func runAsync(ctx context.Context, plan *playbooks.Plan, in Input, h Hooks) <-chan Outcome {
	ch := make(chan Outcome, 1)
	go func() { ch <- Run(ctx, plan, in, h) }()
	return ch
}

// TestAbandonsAStepThatIgnoresItsDeadline: a step deaf to its context no
// longer hangs its tier for ever: past deadline + grace it is recorded as a
// timeout, the next tier runs, the gauge counts it until it returns, and what
// it returns late is never recorded.
func TestAbandonsAStepThatIgnoresItsDeadline(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	c := fakestep.NewCounter()
	hung := fakestep.Step("hung", vocab.TierMetrics, deaf(started, release))
	hung.Timeout = 30 * time.Millisecond
	hung.ContinueOnError = true
	plan := &playbooks.Plan{Playbook: "pb", Steps: []playbooks.PlannedStep{hung,
		fakestep.Step("next", vocab.TierTraces, fakestep.OK(c, nil))}}
	var g gauge
	var mu sync.Mutex
	done := map[string]int{}
	hooks := Hooks{Abandoned: g.add, StepDone: func(_ context.Context, rec StepRecord) error {
		mu.Lock()
		defer mu.Unlock()
		done[rec.ID]++
		return nil
	}}
	out := fakestep.WaitFor(t, runAsync(context.Background(), plan, Input{RunID: "r", AbandonGrace: 50 * time.Millisecond}, hooks), "the plan to end past its hung step")
	<-started
	rec := out.Steps[0]
	if rec.ID != "hung" || rec.Status != vocab.StatusFailed || rec.Reason != string(vocab.ReasonTimeout) ||
		!strings.Contains(rec.Error, "abandoned") || !strings.Contains(rec.Error, "ran longer than its timeout 30ms") {
		t.Fatalf("hung step recorded as %+v, want failed/timeout saying abandoned and the deadline", rec)
	}
	if c.Count("r/next") != 1 || out.Status != vocab.StatusPartial {
		t.Errorf("next tier ran %d times, plan %s; want 1, partial", c.Count("r/next"), out.Status)
	}
	if n, _ := g.get("test"); n != 1 {
		t.Errorf("abandoned gauge = %d while the step still runs, want 1", n)
	}
	close(release)
	deadline := time.Now().Add(10 * time.Second)
	for n, _ := g.get("test"); n != 0 && time.Now().Before(deadline); n, _ = g.get("test") {
		time.Sleep(5 * time.Millisecond)
	}
	if n, calls := g.get("test"); n != 0 || fmt.Sprint(calls) != "[1 -1]" {
		t.Errorf("gauge after the step returned: %d (calls %v), want 0 after [1 -1]", n, calls)
	}
	time.Sleep(20 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if done["hung"] != 1 {
		t.Errorf("the hung step was recorded %d times, want once (its late result discarded)", done["hung"])
	}
}

// TestInterruptionDoesNotWaitForADeafStep: an interrupted run (shutdown, lost
// lease) is given back within the grace even when a step ignores the
// interruption; the step gets no record, so it runs again on resume.
func TestInterruptionDoesNotWaitForADeafStep(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	plan := &playbooks.Plan{Playbook: "pb", Steps: []playbooks.PlannedStep{
		fakestep.Step("hung", vocab.TierMetrics, deaf(started, release))}}
	ctx, cancel := context.WithCancelCause(context.Background())
	recorded := 0
	ch := runAsync(ctx, plan, Input{RunID: "r", AbandonGrace: 50 * time.Millisecond},
		Hooks{StepDone: func(context.Context, StepRecord) error { recorded++; return nil }})
	<-started
	cancel(fmt.Errorf("%w: test shutdown", ErrInterrupted))
	out := fakestep.WaitFor(t, ch, "the interrupted plan to return")
	if !out.Interrupted || recorded != 0 || !errors.Is(out.Cause, ErrInterrupted) {
		t.Fatalf("outcome %+v, %d records; want interrupted, none", out, recorded)
	}
}

// TestUnrecordedStepStopsThePlan: when StepDone cannot record a step (the
// store failed), the plan does not go on as if it had: it stops as
// interrupted with ErrNotRecorded, and no later tier runs.
func TestUnrecordedStepStopsThePlan(t *testing.T) {
	c := fakestep.NewCounter()
	plan := &playbooks.Plan{Playbook: "pb", Steps: []playbooks.PlannedStep{
		fakestep.Step("snap", vocab.TierMetrics, fakestep.OK(c, nil)),
		fakestep.Step("later", vocab.TierTraces, fakestep.OK(c, nil))}}
	storeDown := errors.New("database is locked")
	out := Run(context.Background(), plan, Input{RunID: "r"}, Hooks{StepDone: func(context.Context, StepRecord) error { return storeDown }})
	if !out.Interrupted || !errors.Is(out.Cause, ErrNotRecorded) || !errors.Is(out.Cause, storeDown) {
		t.Fatalf("outcome %+v (cause %v), want interrupted by ErrNotRecorded wrapping the store's error", out, out.Cause)
	}
	if c.Count("r/later") != 0 {
		t.Error("a later tier ran after a step could not be recorded")
	}
}

// TestPlanTimeoutCountsFromTheFirstStart: a run resumed again and again does
// not get a fresh timeout each attempt: the plan's timeout counts from
// Input.Started.
func TestPlanTimeoutCountsFromTheFirstStart(t *testing.T) {
	for _, tc := range []struct {
		name    string
		started time.Duration // before now
		want    vocab.Status
	}{
		{name: "started long ago", started: time.Hour, want: vocab.StatusFailed},
		{name: "started within the timeout", started: 10 * time.Minute, want: vocab.StatusSucceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fakestep.NewCounter()
			plan := &playbooks.Plan{Playbook: "pb", Timeout: 30 * time.Minute, Steps: []playbooks.PlannedStep{
				fakestep.Step("a", vocab.TierMetrics, fakestep.OK(c, nil))}}
			out := Run(context.Background(), plan, Input{RunID: "r", Started: time.Now().Add(-tc.started)}, Hooks{})
			if out.Status != tc.want {
				t.Fatalf("status %s (%s), want %s", out.Status, out.Reason, tc.want)
			}
			if tc.want == vocab.StatusFailed && (c.Count("r/a") != 0 || !strings.Contains(out.Steps[0].Error, "not started: playbook pb ran longer than its timeout 30m0s")) {
				t.Errorf("step ran %d times, record %+v; want not started, saying the timeout", c.Count("r/a"), out.Steps[0])
			}
		})
	}
}

// TestExecutorNeedsNoDatabase: the executor and `autocapture test`'s runner
// build without River or a database driver.
func TestExecutorNeedsNoDatabase(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".", "../../playbooks/playtest").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, bad := range []string{"riverqueue", "database/sql", "jackc/pgx", "modernc.org/sqlite", "autocapture/runner\n"} {
			if strings.Contains(dep+"\n", bad) {
				t.Errorf("the executor depends on %s", dep)
			}
		}
	}
}

// windingStep undoes something once its context ends (a profile's stop) and
// says how long that takes.
type windingStep struct {
	undo, wind time.Duration
}

func (w windingStep) WindDown() time.Duration { return w.wind }

func (w windingStep) Run(ctx context.Context, _ *vocab.Input) (*vocab.Result, error) {
	<-ctx.Done()
	time.Sleep(w.undo) // the stop, detached from ctx
	return &vocab.Result{Summary: "stopped and kept"}, fmt.Errorf("frame cut: %w", context.Cause(ctx))
}

// TestAWindingStepIsWaitedFor: a step that declares its wind-down (the
// profile step's stop_profile flush) is waited for that long once its
// context ends, past AbandonGrace: its record is the step's own (cancelled,
// with what it kept), not "abandoned"; one that winds down longer than it
// declared is still abandoned.
func TestAWindingStepIsWaitedFor(t *testing.T) {
	for _, tc := range []struct {
		name        string
		step        windingStep
		wantAbandon bool
	}{
		{"within its wind-down", windingStep{undo: 300 * time.Millisecond, wind: 5 * time.Second}, false},
		{"past its wind-down", windingStep{undo: 3 * time.Second, wind: 200 * time.Millisecond}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := fakestep.Step("profile", vocab.TierProfile, tc.step)
			plan := &playbooks.Plan{Playbook: "pb", Steps: []playbooks.PlannedStep{st}}
			ctx, cancel := context.WithCancelCause(context.Background())
			ch := runAsync(ctx, plan, Input{RunID: "r", AbandonGrace: 50 * time.Millisecond}, Hooks{})
			time.Sleep(50 * time.Millisecond)
			cancel(ErrCancelled)
			out := fakestep.WaitFor(t, ch, "the plan to end")
			rec := out.Steps[0]
			abandoned := strings.Contains(rec.Error, "abandoned")
			if abandoned != tc.wantAbandon {
				t.Fatalf("record %+v: abandoned=%v, want %v", rec, abandoned, tc.wantAbandon)
			}
			if !tc.wantAbandon && (rec.Status != vocab.StatusCancelled || !rec.Partial || rec.Summary != "stopped and kept") {
				t.Errorf("record %+v, want cancelled with the partial result kept", rec)
			}
		})
	}
}
