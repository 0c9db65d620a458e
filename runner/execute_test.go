package runner

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/capture"
	"github.com/autocapture/autocapture/playbooks"
)

// recorder collects StepDone calls.
type recorder struct {
	mu   sync.Mutex
	recs map[string]StepRecord
}

func (r *recorder) hooks() Hooks {
	r.recs = map[string]StepRecord{}
	return Hooks{StepDone: func(_ context.Context, rec StepRecord) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.recs[rec.ID] = rec
	}}
}

func (r *recorder) get(id string) StepRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.recs[id]
}

func failStep(c *counter, err error) capture.Step {
	return funcStep(func(ctx context.Context, in *capture.Input) (*capture.Result, error) {
		defer c.enter(in.RunID + "/" + in.StepID)()
		return nil, err
	})
}

func TestRunPlanStatuses(t *testing.T) {
	refused := capture.Errorf(capture.ReasonRefused, "dial 127.0.0.1:1: refused")
	type want struct{ status, reason string }
	cases := []struct {
		name    string
		steps   func(c *counter) []playbooks.PlannedStep
		plan    string
		want    map[string]want
		notRun  []string
		reasonH string
		errH    map[string]string // step id → text its error must contain
	}{
		{
			name: "all succeed",
			steps: func(c *counter) []playbooks.PlannedStep {
				return []playbooks.PlannedStep{step("a", capture.TierMetrics, okStep(c, nil)), step("b", capture.TierTraces, okStep(c, nil))}
			},
			plan: "succeeded",
			want: map[string]want{"a": {StepSucceeded, ""}, "b": {StepSucceeded, ""}},
		},
		{
			name: "failure stops later tiers",
			steps: func(c *counter) []playbooks.PlannedStep {
				return []playbooks.PlannedStep{step("a", capture.TierMetrics, okStep(c, nil)), step("bad", capture.TierMetrics, failStep(c, refused)),
					step("later", capture.TierTraces, okStep(c, nil))}
			},
			plan:    "partial",
			want:    map[string]want{"a": {StepSucceeded, ""}, "bad": {StepFailed, "refused"}, "later": {StepSkipped, "step bad failed earlier"}},
			notRun:  []string{"later"},
			reasonH: "bad (refused)",
		},
		{
			name: "a step with nothing to do is skipped, not a failure",
			steps: func(c *counter) []playbooks.PlannedStep {
				off := step("traces", capture.TierTraces, failStep(c, capture.Skipf("tier 2 is off: no trace backend configured (traces.url)")))
				return []playbooks.PlannedStep{step("a", capture.TierMetrics, okStep(c, nil)), off}
			},
			plan: "succeeded",
			want: map[string]want{"a": {StepSucceeded, ""}, "traces": {StepSkipped, "tier 2 is off: no trace backend configured (traces.url)"}},
		},
		{
			name: "continue_on_error keeps going",
			steps: func(c *counter) []playbooks.PlannedStep {
				bad := step("bad", capture.TierMetrics, failStep(c, refused))
				bad.ContinueOnError = true
				return []playbooks.PlannedStep{bad, step("later", capture.TierTraces, okStep(c, nil))}
			},
			plan: "partial",
			want: map[string]want{"bad": {StepFailed, "refused"}, "later": {StepSucceeded, ""}},
		},
		{
			name: "render error is bad-config and nothing succeeded",
			steps: func(c *counter) []playbooks.PlannedStep {
				s := playbooks.PlannedStep{ID: "r", Kind: "test", Tier: capture.TierMetrics, RenderErr: errors.New(`label "instance" missing`)}
				return []playbooks.PlannedStep{s}
			},
			plan: "failed",
			want: map[string]want{"r": {StepFailed, "bad-config"}},
		},
		{
			// A traces step guarded by `when` whose config uses a label the alert
			// lacks: with the guard false it is skipped, not failed; with it true
			// the render error is its failure.
			name: "when is decided before a render error",
			steps: func(c *counter) []playbooks.PlannedStep {
				tri := step("tri", capture.TierTriage, funcStep(func(context.Context, *capture.Input) (*capture.Result, error) {
					return &capture.Result{Verdict: &capture.Verdict{ID: "overload"}}, nil
				}))
				guarded := playbooks.PlannedStep{ID: "traces", Kind: "traces", Tier: capture.TierTraces,
					When: when(`steps.tri.verdict == "unexplained"`), RenderErr: errors.New(`map has no entry for key "service"`)}
				taken := playbooks.PlannedStep{ID: "traces2", Kind: "traces", Tier: capture.TierTraces,
					When: when(`steps.tri.verdict == "overload"`), RenderErr: errors.New(`map has no entry for key "service"`)}
				taken.ContinueOnError = true
				return []playbooks.PlannedStep{tri, guarded, taken}
			},
			plan: "partial",
			want: map[string]want{"tri": {StepSucceeded, ""},
				"traces":  {StepSkipped, `when: steps.tri.verdict == "unexplained" is false`},
				"traces2": {StepFailed, "bad-config"}},
			errH: map[string]string{"traces2": `no entry for key "service"`},
		},
		{
			name: "when false skips, when true sees prior findings",
			steps: func(c *counter) []playbooks.PlannedStep {
				yes := step("yes", capture.TierTraces, okStep(c, nil))
				yes.When = when(`steps.tri.verdict == "unexplained"`)
				no := step("no", capture.TierTraces, okStep(c, nil))
				no.When = when("false")
				tri := step("tri", capture.TierTriage, funcStep(func(context.Context, *capture.Input) (*capture.Result, error) {
					return &capture.Result{Verdict: &capture.Verdict{ID: "unexplained"}}, nil
				}))
				return []playbooks.PlannedStep{tri, yes, no}
			},
			plan:   "succeeded",
			want:   map[string]want{"tri": {StepSucceeded, ""}, "yes": {StepSucceeded, ""}, "no": {StepSkipped, "when: false is false"}},
			notRun: []string{"no"},
		},
		{
			// No step "first" ran, so steps.first.n reads nil and nil > 1 fails
			// at evaluation (optional chaining makes the read itself safe).
			name: "when error at evaluation is bad-config",
			steps: func(c *counter) []playbooks.PlannedStep {
				s := step("w", capture.TierMetrics, okStep(c, nil))
				s.When = when("steps.first.n > 1")
				return []playbooks.PlannedStep{s}
			},
			plan:   "failed",
			want:   map[string]want{"w": {StepFailed, "bad-config"}},
			notRun: []string{"w"},
			errH:   map[string]string{"w": "invalid operation: <nil> > int"},
		},
		{
			name: "step timeout is classified with its cause",
			steps: func(c *counter) []playbooks.PlannedStep {
				s := step("slow", capture.TierMetrics, blockStep(c, nil, nil))
				s.Timeout = 20 * time.Millisecond
				return []playbooks.PlannedStep{s}
			},
			plan:    "failed",
			want:    map[string]want{"slow": {StepFailed, "timeout"}},
			reasonH: "slow (timeout)",
		},
		{
			name: "panic is an internal failure",
			steps: func(c *counter) []playbooks.PlannedStep {
				return []playbooks.PlannedStep{step("p", capture.TierMetrics, funcStep(func(context.Context, *capture.Input) (*capture.Result, error) {
					panic("oops")
				}))}
			},
			plan: "failed",
			want: map[string]want{"p": {StepFailed, "internal"}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCounter()
			plan := &playbooks.Plan{Playbook: "pb", Steps: tc.steps(c)}
			var r recorder
			out := RunPlan(context.Background(), plan, PlanInput{RunID: "r1", Alert: template.Alert{Fingerprint: "f"}}, r.hooks())
			if out.Status != tc.plan {
				t.Fatalf("plan status = %q (%s), want %q", out.Status, out.Reason, tc.plan)
			}
			if tc.reasonH != "" && !strings.Contains(out.Reason, tc.reasonH) {
				t.Errorf("plan reason %q lacks %q", out.Reason, tc.reasonH)
			}
			for id, w := range tc.want {
				got := r.get(id)
				if got.Status != w.status || (w.reason != "" && got.Reason != w.reason) {
					t.Errorf("step %s = %s/%q (%s), want %s/%q", id, got.Status, got.Reason, got.Error, w.status, w.reason)
				}
			}
			for id, h := range tc.errH {
				if got := r.get(id).Error; !strings.Contains(got, h) {
					t.Errorf("step %s error %q lacks %q", id, got, h)
				}
			}
			for _, id := range tc.notRun {
				if n := c.count("r1/" + id); n != 0 {
					t.Errorf("step %s ran %d times, want 0", id, n)
				}
			}
			if len(out.Steps) != len(tc.want) {
				t.Errorf("outcome has %d steps, want %d", len(out.Steps), len(tc.want))
			}
		})
	}
}

func TestRunPlanTimeoutCauseInError(t *testing.T) {
	c := newCounter()
	s := step("slow", capture.TierMetrics, blockStep(c, nil, nil))
	s.Timeout = 10 * time.Millisecond
	var r recorder
	RunPlan(context.Background(), &playbooks.Plan{Playbook: "pb", Steps: []playbooks.PlannedStep{s}}, PlanInput{RunID: "r"}, r.hooks())
	if got := r.get("slow").Error; !strings.Contains(got, "ran longer than its timeout 10ms") {
		t.Fatalf("error %q does not carry the readable cause", got)
	}
}

// TestPlanTimeoutFailsTheStepsItKeptFromStarting: when the playbook's own
// timeout ends the plan, the steps it kept from starting are failures with
// reason timeout, not quiet skips, and the plan says so.
func TestPlanTimeoutFailsTheStepsItKeptFromStarting(t *testing.T) {
	c := newCounter()
	plan := &playbooks.Plan{Playbook: "pb", Timeout: 50 * time.Millisecond, Steps: []playbooks.PlannedStep{
		step("slow", capture.TierMetrics, blockStep(c, nil, nil)),
		step("later", capture.TierTraces, okStep(c, nil)),
	}}
	var r recorder
	out := RunPlan(context.Background(), plan, PlanInput{RunID: "r"}, r.hooks())
	for _, id := range []string{"slow", "later"} {
		if got := r.get(id); got.Status != StepFailed || got.Reason != "timeout" {
			t.Errorf("step %s = %s/%q (%s), want failed/timeout", id, got.Status, got.Reason, got.Error)
		}
	}
	if !strings.Contains(r.get("later").Error, "not started") || out.Status != "failed" {
		t.Fatalf("plan %s (%s); later: %q", out.Status, out.Reason, r.get("later").Error)
	}
}

// TestCompileCondition pins what the runner relies on from playbooks'
// compiler: real expressions, rejected at compile time when malformed.
func TestCompileCondition(t *testing.T) {
	cases := []struct {
		name, src, errH string
	}{
		{name: "verdict comparison", src: `steps.tri.verdict == "unexplained"`},
		{name: "label read", src: `alert.labels.severity in ["page", "critical"]`},
		{name: "unknown alert field", src: `alert.nope == "x"`, errH: `alert has no field "nope"`},
		{name: "not a bool", src: `1 + 2`, errH: "expected bool"},
		{name: "syntax", src: `steps.tri.verdict ==`, errH: "unexpected token"},
		{name: "unknown root", src: `boom`, errH: "unknown name boom"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := playbooks.CompileCondition(tc.src)
			if tc.errH == "" {
				if err != nil || c == nil || c.Source != tc.src {
					t.Fatalf("CompileCondition(%q) = %+v, %v", tc.src, c, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.errH) {
				t.Fatalf("CompileCondition(%q) error %v, want one containing %q", tc.src, err, tc.errH)
			}
		})
	}
}
