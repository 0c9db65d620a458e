package runner

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/autocapture/autocapture/capture"
	"github.com/autocapture/autocapture/playbooks"
)

// when compiles a real `when` expression as a playbook would carry it; a
// source that does not compile is a broken test.
func when(src string) *playbooks.Condition {
	c, err := playbooks.CompileCondition(src)
	if err != nil {
		panic(fmt.Sprintf("test condition %q: %v", src, err))
	}
	return c
}

// funcStep is a test step made of a function.
type funcStep func(ctx context.Context, in *capture.Input) (*capture.Result, error)

func (f funcStep) Run(ctx context.Context, in *capture.Input) (*capture.Result, error) {
	return f(ctx, in)
}

// counter counts executions per key and the most running at once.
type counter struct {
	mu      sync.Mutex
	runs    map[string]int
	now     atomic.Int64
	maxSeen atomic.Int64
}

func newCounter() *counter { return &counter{runs: map[string]int{}} }

func (c *counter) enter(key string) func() {
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

func (c *counter) count(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[key]
}

func (c *counter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.runs))
	for k, v := range c.runs {
		out[k] = v
	}
	return out
}

// ok returns a step that counts itself and succeeds with findings.
func okStep(c *counter, findings map[string]any) capture.Step {
	return funcStep(func(ctx context.Context, in *capture.Input) (*capture.Result, error) {
		defer c.enter(in.RunID + "/" + in.StepID)()
		return &capture.Result{Summary: "ok " + in.StepID, Findings: findings}, nil
	})
}

// blockStep counts itself, signals started, and blocks until its context ends or
// release is closed.
func blockStep(c *counter, started chan<- string, release <-chan struct{}) capture.Step {
	return funcStep(func(ctx context.Context, in *capture.Input) (*capture.Result, error) {
		defer c.enter(in.RunID + "/" + in.StepID)()
		if started != nil {
			started <- in.RunID + "/" + in.StepID
		}
		select {
		case <-ctx.Done():
			return &capture.Result{Summary: "stopped", Artifacts: []capture.Artifact{{Name: "partial.json"}}}, ctx.Err()
		case <-release:
			return &capture.Result{Summary: "released"}, nil
		}
	})
}

func step(id string, tier capture.Tier, s capture.Step) playbooks.PlannedStep {
	return playbooks.PlannedStep{ID: id, Kind: "test", Tier: tier, Step: s}
}
