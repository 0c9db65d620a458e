package executor

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/vocab"
)

// causeFromPrior is a triage stand-in: kv-pressure once the scrape's signals
// are in, overload from the snapshot alone, and the ids it read as sources.
func causeFromPrior() vocab.Step {
	return fakestep.Func(func(_ context.Context, in *vocab.Input) (*vocab.Result, error) {
		id := vocab.VerdictOverload
		if r := in.Prior["scrape"]; r != nil && r.Signals[vocab.SigKVUsage] > 0 {
			id = vocab.VerdictKVPressure
		}
		var used []string
		for k := range in.Prior {
			used = append(used, k)
		}
		slices.Sort(used)
		return &vocab.Result{Summary: id, Verdict: &vocab.Verdict{ID: id}, Findings: map[string]any{"sources": used}}, nil
	})
}

// signalled succeeds with one signal, after release (nil: at once).
func signalled(name string, v float64, release <-chan struct{}) vocab.Step {
	return fakestep.Func(func(ctx context.Context, _ *vocab.Input) (*vocab.Result, error) {
		if release != nil {
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return &vocab.Result{Summary: name, Signals: vocab.Signals{name: v}}, nil
	})
}

type prelimRecorder struct {
	mu  sync.Mutex
	got []Preliminary
	// during is called inside the hook (to check what still runs).
	during func(Preliminary)
}

func (r *prelimRecorder) hook(_ context.Context, p Preliminary) error {
	if r.during != nil {
		r.during(p)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, p)
	return nil
}

func prelimPlan(release <-chan struct{}) *playbooks.Plan {
	tri := fakestep.Step("tri", vocab.TierTriage, causeFromPrior())
	tri.Kind = "triage"
	return &playbooks.Plan{Playbook: "pb", Steps: []playbooks.PlannedStep{
		fakestep.Step("snapshot", vocab.TierMetrics, signalled(vocab.SigQueueDepth, 40, nil)),
		fakestep.Step("scrape", vocab.TierMetrics, signalled(vocab.SigKVUsage, 0.99, release)),
		fakestep.Step("http", vocab.TierMetrics, fakestep.OK(fakestep.NewCounter(), nil)),
		tri,
	}}
}

func TestPreliminaryVerdictWhileTierOneRuns(t *testing.T) {
	release := make(chan struct{})
	var r prelimRecorder
	var rec recorder
	hooks := rec.hooks()
	var once sync.Once
	r.during = func(Preliminary) { once.Do(func() { close(release) }) } // the scrape is held until here: it ran before tier 1 ended
	hooks.Preliminary = r.hook
	out := Run(context.Background(), prelimPlan(release), Input{RunID: "r"}, hooks)
	if len(r.got) == 0 {
		t.Fatal("no preliminary verdict")
	}
	// A second one comes only when the scrape finished before the http step.
	if len(r.got) > 2 || len(r.got) == 2 && (r.got[1].Key != "scrape+snapshot" || r.got[1].Result.Verdict.ID != vocab.VerdictKVPressure) {
		t.Errorf("preliminaries = %+v, want the snapshot's, then at most the snapshot and scrape's", r.got)
	}
	p := r.got[0]
	if p.Key != "snapshot" || !slices.Equal(p.Sources, []string{"snapshot"}) || !slices.Contains(p.Waiting, "scrape") ||
		p.StepID != "tri" || p.Plan != "pb" || p.At.IsZero() {
		t.Errorf("preliminary = %+v, want key snapshot from the snapshot alone, the scrape waiting", p)
	}
	if v := p.Result.Verdict; v == nil || v.ID != vocab.VerdictOverload || !v.Preliminary {
		t.Errorf("preliminary verdict = %+v, want overload marked preliminary", v)
	}
	if out.Verdict == nil || out.Verdict.ID != vocab.VerdictKVPressure || out.Verdict.Preliminary {
		t.Errorf("refined verdict = %+v, want kv-pressure, not preliminary", out.Verdict)
	}
	if tri := rec.get("tri"); tri.Verdict == nil || tri.Verdict.Preliminary {
		t.Errorf("triage's record = %+v, want the refined verdict", tri)
	}
}

func TestPreliminaryReachedAgainOnResume(t *testing.T) {
	release := make(chan struct{})
	var r prelimRecorder
	var once sync.Once
	r.during = func(Preliminary) { once.Do(func() { close(release) }) }
	done := map[string]StepRecord{"snapshot": {Plan: "pb", ID: "snapshot", Kind: "test", Tier: vocab.TierMetrics,
		Status: vocab.StatusSucceeded, Signals: vocab.Signals{vocab.SigQueueDepth: 40}}}
	out := Run(context.Background(), prelimPlan(release), Input{RunID: "r", Done: done}, Hooks{Preliminary: r.hook})
	if len(r.got) == 0 || r.got[0].Key != "snapshot" {
		t.Fatalf("preliminaries on resume = %+v, want the snapshot's again, under its key", r.got)
	}
	if out.Verdict == nil || out.Verdict.ID != vocab.VerdictKVPressure {
		t.Errorf("refined verdict = %+v", out.Verdict)
	}
}

func TestNoPreliminary(t *testing.T) {
	cases := []struct {
		name string
		plan func() *playbooks.Plan
		done map[string]StepRecord
	}{
		{name: "one tier-1 step", plan: func() *playbooks.Plan {
			p := prelimPlan(nil)
			p.Steps = append(p.Steps[:1], p.Steps[3])
			return p
		}},
		{name: "triage's when is false", plan: func() *playbooks.Plan {
			p := prelimPlan(nil)
			p.Steps[3].When = fakestep.When(`steps.scrape.summary == "x"`)
			return p
		}},
		{name: "triage already recorded", plan: func() *playbooks.Plan { return prelimPlan(nil) },
			done: map[string]StepRecord{"tri": {Plan: "pb", ID: "tri", Status: vocab.StatusSucceeded, Verdict: &vocab.Verdict{ID: "healthy"}}}},
		{name: "signals only once tier 1 is over", plan: func() *playbooks.Plan {
			p := prelimPlan(nil)
			p.Steps[0].Step = fakestep.Func(func(context.Context, *vocab.Input) (*vocab.Result, error) {
				time.Sleep(50 * time.Millisecond) // last to finish
				return &vocab.Result{Signals: vocab.Signals{vocab.SigQueueDepth: 1}}, nil
			})
			p.Steps[1].Step = fakestep.OK(fakestep.NewCounter(), nil)
			return p
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var r prelimRecorder
			Run(context.Background(), tc.plan(), Input{RunID: "r", Done: tc.done}, Hooks{Preliminary: r.hook})
			if len(r.got) != 0 {
				t.Errorf("preliminaries = %+v, want none", r.got)
			}
		})
	}
}
