// Package fakestep holds the steps, plans and waits the runner's tests build
// plans from: the executor's tests and the durable service's share them.
package fakestep

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/vocab"
	"github.com/prometheus/alertmanager/template"
)

// When compiles a real `when` expression as a playbook would carry it; a
// source that does not compile is a broken test.
func When(src string) *playbooks.Condition {
	c, err := playbooks.CompileCondition(src)
	if err != nil {
		panic(fmt.Sprintf("test condition %q: %v", src, err))
	}
	return c
}

// Func is a test step made of a function.
type Func func(ctx context.Context, in *vocab.Input) (*vocab.Result, error)

// Run calls f.
func (f Func) Run(ctx context.Context, in *vocab.Input) (*vocab.Result, error) {
	return f(ctx, in)
}

// Counter counts executions per key (run/step) and the most running at once.
type Counter struct {
	mu      sync.Mutex
	runs    map[string]int
	now     atomic.Int64
	maxSeen atomic.Int64
}

// NewCounter returns an empty Counter.
func NewCounter() *Counter { return &Counter{runs: map[string]int{}} }

// Enter counts one execution of key; the returned function marks its end.
func (c *Counter) Enter(key string) func() {
	c.mu.Lock()
	c.runs[key]++
	c.mu.Unlock()
	n := c.now.Add(1)
	for {
		m := c.maxSeen.Load()
		if n <= m || c.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	return func() { c.now.Add(-1) }
}

// Count is how many times key was entered.
func (c *Counter) Count(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[key]
}

// MaxSeen is the most executions that were running at once.
func (c *Counter) MaxSeen() int64 { return c.maxSeen.Load() }

// Snapshot copies the counts.
func (c *Counter) Snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.runs))
	for k, v := range c.runs {
		out[k] = v
	}
	return out
}

// OK returns a step that counts itself and succeeds with findings.
func OK(c *Counter, findings map[string]any) vocab.Step {
	return Func(func(ctx context.Context, in *vocab.Input) (*vocab.Result, error) {
		defer c.Enter(in.RunID + "/" + in.StepID)()
		return &vocab.Result{Summary: "ok " + in.StepID, Findings: findings}, nil
	})
}

// Fail returns a step that counts itself and fails with err.
func Fail(c *Counter, err error) vocab.Step {
	return Func(func(ctx context.Context, in *vocab.Input) (*vocab.Result, error) {
		defer c.Enter(in.RunID + "/" + in.StepID)()
		return nil, err
	})
}

// Block counts itself, signals started, and blocks until its context ends or
// release is closed.
func Block(c *Counter, started chan<- string, release <-chan struct{}) vocab.Step {
	return Func(func(ctx context.Context, in *vocab.Input) (*vocab.Result, error) {
		defer c.Enter(in.RunID + "/" + in.StepID)()
		if started != nil {
			started <- in.RunID + "/" + in.StepID
		}
		select {
		case <-ctx.Done():
			return &vocab.Result{Summary: "stopped", Artifacts: []vocab.Artifact{{Name: "partial.json"}}}, ctx.Err()
		case <-release:
			return &vocab.Result{Summary: "released"}, nil
		}
	})
}

// Partial fails the way the scrape step does when its deadline expires in
// the gap (or the http step on a refusal): with the evidence it gathered AND an
// error. With wait it blocks until its context ends and returns ctx's error.
func Partial(c *Counter, wait bool, err error) vocab.Step {
	return Func(func(ctx context.Context, in *vocab.Input) (*vocab.Result, error) {
		defer c.Enter(in.RunID + "/" + in.StepID)()
		res := &vocab.Result{Summary: "scrape of 127.0.0.1:8000 (one scrape: lifetime histograms, no rates)",
			Findings:  map[string]any{"second_scrape_error": "stopped", "target": "127.0.0.1:8000"},
			Signals:   vocab.Signals{vocab.SigKVUsage: 0.97},
			Artifacts: []vocab.Artifact{{Name: "scrape-1.txt", Key: "runs/x/scrape-1.txt"}}}
		if wait {
			<-ctx.Done()
			return res, fmt.Errorf("scrape: stopped after the first scrape: %w", ctx.Err())
		}
		return res, err
	})
}

// PriorReader sends the Prior it was given, as triage reads it.
func PriorReader(seen chan<- map[string]*vocab.Result) vocab.Step {
	return Func(func(_ context.Context, in *vocab.Input) (*vocab.Result, error) {
		seen <- in.Prior
		return &vocab.Result{Summary: "read"}, nil
	})
}

// Planner plans an alert with Plans and rebuilds a stored plan as the plan
// of the same name and digest Plans returns: the run service's Planner.
type Planner struct {
	Plans func(a template.Alert) []*playbooks.Plan
}

func (f Planner) Plan(a template.Alert, _ vocab.Window) ([]*playbooks.Plan, error) {
	return f.Plans(a), nil
}

func (f Planner) Rebuild(sp playbooks.StoredPlan, a template.Alert, _ vocab.Window) (*playbooks.Plan, error) {
	for _, p := range f.Plans(a) {
		if p.Playbook == sp.Playbook && p.Digest == sp.Digest {
			return p, nil
		}
	}
	return nil, fmt.Errorf("no playbook %s with digest %s", sp.Playbook, sp.Digest)
}

// Plan is playbook name's plan of steps, as its file would load.
func Plan(name string, steps ...playbooks.PlannedStep) *playbooks.Plan {
	return &playbooks.Plan{Playbook: name, File: name + ".yaml", Digest: "sha-" + name,
		Source: []byte("name: " + name), Steps: steps}
}

// OnePlan plans every alert as playbook "pb" of the steps, made afresh each
// time.
func OnePlan(steps ...func() playbooks.PlannedStep) Planner {
	return Planner{Plans: func(template.Alert) []*playbooks.Plan {
		ps := make([]playbooks.PlannedStep, len(steps))
		for i, s := range steps {
			ps[i] = s()
		}
		return []*playbooks.Plan{Plan("pb", ps...)}
	}}
}

// Step is a planned step of kind "test".
func Step(id string, tier vocab.Tier, s vocab.Step) playbooks.PlannedStep {
	return playbooks.PlannedStep{ID: id, Kind: "test", Tier: tier, Step: s}
}

// WaitFor receives from ch or fails the test after 30 s.
func WaitFor[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("gave up waiting for %s", what)
	}
	var zero T
	return zero
}
