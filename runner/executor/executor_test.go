package executor

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/vocab"
)

// recorder collects StepDone calls.
type recorder struct {
	mu   sync.Mutex
	recs map[string]StepRecord
}

func (r *recorder) hooks() Hooks {
	r.recs = map[string]StepRecord{}
	return Hooks{StepDone: func(_ context.Context, rec StepRecord) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.recs[rec.ID] = rec
		return nil
	}}
}

func (r *recorder) get(id string) StepRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.recs[id]
}

func TestRunPlanStatuses(t *testing.T) {
	refused := vocab.Errorf(vocab.ReasonRefused, "dial 127.0.0.1:1: refused")
	type want struct {
		status vocab.Status
		reason string
	}
	cases := []struct {
		name    string
		steps   func(c *fakestep.Counter) []playbooks.PlannedStep
		plan    vocab.Status
		want    map[string]want
		notRun  []string
		reasonH string
		errH    map[string]string // step id → text its error must contain
	}{
		{
			name: "all succeed",
			steps: func(c *fakestep.Counter) []playbooks.PlannedStep {
				return []playbooks.PlannedStep{fakestep.Step("a", vocab.TierMetrics, fakestep.OK(c, nil)), fakestep.Step("b", vocab.TierTraces, fakestep.OK(c, nil))}
			},
			plan: "succeeded",
			want: map[string]want{"a": {vocab.StatusSucceeded, ""}, "b": {vocab.StatusSucceeded, ""}},
		},
		{
			name: "failure stops later tiers",
			steps: func(c *fakestep.Counter) []playbooks.PlannedStep {
				return []playbooks.PlannedStep{fakestep.Step("a", vocab.TierMetrics, fakestep.OK(c, nil)), fakestep.Step("bad", vocab.TierMetrics, fakestep.Fail(c, refused)),
					fakestep.Step("later", vocab.TierTraces, fakestep.OK(c, nil))}
			},
			plan:    "partial",
			want:    map[string]want{"a": {vocab.StatusSucceeded, ""}, "bad": {vocab.StatusFailed, "refused"}, "later": {vocab.StatusSkipped, "step bad failed earlier"}},
			notRun:  []string{"later"},
			reasonH: "bad (refused)",
		},
		{
			name: "a step whose backend is not configured is not-configured, not a failure",
			steps: func(c *fakestep.Counter) []playbooks.PlannedStep {
				off := fakestep.Step("traces", vocab.TierTraces, fakestep.Fail(c, vocab.NotConfigured("no trace backend (set traces.url to Jaeger or Tempo)")))
				return []playbooks.PlannedStep{fakestep.Step("a", vocab.TierMetrics, fakestep.OK(c, nil)), off}
			},
			plan: "succeeded",
			want: map[string]want{"a": {vocab.StatusSucceeded, ""}, "traces": {vocab.StatusNotConfigured, "no trace backend (set traces.url to Jaeger or Tempo)"}},
		},
		{
			name: "continue_on_error keeps going",
			steps: func(c *fakestep.Counter) []playbooks.PlannedStep {
				bad := fakestep.Step("bad", vocab.TierMetrics, fakestep.Fail(c, refused))
				bad.ContinueOnError = true
				return []playbooks.PlannedStep{bad, fakestep.Step("later", vocab.TierTraces, fakestep.OK(c, nil))}
			},
			plan: "partial",
			want: map[string]want{"bad": {vocab.StatusFailed, "refused"}, "later": {vocab.StatusSucceeded, ""}},
		},
		{
			name: "render error is bad-config and nothing succeeded",
			steps: func(c *fakestep.Counter) []playbooks.PlannedStep {
				s := playbooks.PlannedStep{ID: "r", Kind: "test", Tier: vocab.TierMetrics, RenderErr: errors.New(`label "instance" missing`)}
				return []playbooks.PlannedStep{s}
			},
			plan: "failed",
			want: map[string]want{"r": {vocab.StatusFailed, "bad-config"}},
		},
		{
			// A traces step guarded by `when` whose config uses a label the alert
			// lacks: with the guard false it is skipped, not failed; with it true
			// the render error is its failure.
			name: "when is decided before a render error",
			steps: func(c *fakestep.Counter) []playbooks.PlannedStep {
				tri := fakestep.Step("tri", vocab.TierTriage, fakestep.Func(func(context.Context, *vocab.Input) (*vocab.Result, error) {
					return &vocab.Result{Verdict: &vocab.Verdict{ID: "overload"}}, nil
				}))
				guarded := playbooks.PlannedStep{ID: "traces", Kind: "traces", Tier: vocab.TierTraces,
					When: fakestep.When(`steps.tri.verdict == "unexplained"`), RenderErr: errors.New(`map has no entry for key "service"`)}
				taken := playbooks.PlannedStep{ID: "traces2", Kind: "traces", Tier: vocab.TierTraces,
					When: fakestep.When(`steps.tri.verdict == "overload"`), RenderErr: errors.New(`map has no entry for key "service"`)}
				taken.ContinueOnError = true
				return []playbooks.PlannedStep{tri, guarded, taken}
			},
			plan: "partial",
			want: map[string]want{"tri": {vocab.StatusSucceeded, ""},
				"traces":  {vocab.StatusSkipped, `when: steps.tri.verdict == "unexplained" is false`},
				"traces2": {vocab.StatusFailed, "bad-config"}},
			errH: map[string]string{"traces2": `no entry for key "service"`},
		},
		{
			name: "when false skips, when true sees prior findings",
			steps: func(c *fakestep.Counter) []playbooks.PlannedStep {
				yes := fakestep.Step("yes", vocab.TierTraces, fakestep.OK(c, nil))
				yes.When = fakestep.When(`steps.tri.verdict == "unexplained"`)
				no := fakestep.Step("no", vocab.TierTraces, fakestep.OK(c, nil))
				no.When = fakestep.When("false")
				tri := fakestep.Step("tri", vocab.TierTriage, fakestep.Func(func(context.Context, *vocab.Input) (*vocab.Result, error) {
					return &vocab.Result{Verdict: &vocab.Verdict{ID: "unexplained"}}, nil
				}))
				return []playbooks.PlannedStep{tri, yes, no}
			},
			plan:   "succeeded",
			want:   map[string]want{"tri": {vocab.StatusSucceeded, ""}, "yes": {vocab.StatusSucceeded, ""}, "no": {vocab.StatusSkipped, "when: false is false"}},
			notRun: []string{"no"},
		},
		{
			// No step "first" ran, so steps.first.n reads nil and nil > 1 fails
			// at evaluation (optional chaining makes the read itself safe).
			name: "when error at evaluation is bad-config",
			steps: func(c *fakestep.Counter) []playbooks.PlannedStep {
				s := fakestep.Step("w", vocab.TierMetrics, fakestep.OK(c, nil))
				s.When = fakestep.When("steps.first.n > 1")
				return []playbooks.PlannedStep{s}
			},
			plan:   "failed",
			want:   map[string]want{"w": {vocab.StatusFailed, "bad-config"}},
			notRun: []string{"w"},
			errH:   map[string]string{"w": "invalid operation: <nil> > int"},
		},
		{
			name: "step timeout is classified with its cause",
			steps: func(c *fakestep.Counter) []playbooks.PlannedStep {
				s := fakestep.Step("slow", vocab.TierMetrics, fakestep.Block(c, nil, nil))
				s.Timeout = 20 * time.Millisecond
				return []playbooks.PlannedStep{s}
			},
			plan:    "failed",
			want:    map[string]want{"slow": {vocab.StatusFailed, "timeout"}},
			reasonH: "slow (timeout)",
		},
		{
			name: "panic is an internal failure",
			steps: func(c *fakestep.Counter) []playbooks.PlannedStep {
				return []playbooks.PlannedStep{fakestep.Step("p", vocab.TierMetrics, fakestep.Func(func(context.Context, *vocab.Input) (*vocab.Result, error) {
					panic("oops")
				}))}
			},
			plan: "failed",
			want: map[string]want{"p": {vocab.StatusFailed, "internal"}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := fakestep.NewCounter()
			plan := &playbooks.Plan{Playbook: "pb", Steps: tc.steps(c)}
			var r recorder
			out := Run(context.Background(), plan, Input{RunID: "r1", Alert: template.Alert{Fingerprint: "f"}}, r.hooks())
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
				if n := c.Count("r1/" + id); n != 0 {
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
	c := fakestep.NewCounter()
	s := fakestep.Step("slow", vocab.TierMetrics, fakestep.Block(c, nil, nil))
	s.Timeout = 10 * time.Millisecond
	var r recorder
	Run(context.Background(), &playbooks.Plan{Playbook: "pb", Steps: []playbooks.PlannedStep{s}}, Input{RunID: "r"}, r.hooks())
	if got := r.get("slow").Error; !strings.Contains(got, "ran longer than its timeout 10ms") {
		t.Fatalf("error %q does not carry the readable cause", got)
	}
}

// TestPlanTimeoutFailsTheStepsItKeptFromStarting: when the playbook's own
// timeout ends the plan, the steps it kept from starting are failures with
// reason timeout, not quiet skips, and the plan says so.
func TestPlanTimeoutFailsTheStepsItKeptFromStarting(t *testing.T) {
	c := fakestep.NewCounter()
	plan := &playbooks.Plan{Playbook: "pb", Timeout: 50 * time.Millisecond, Steps: []playbooks.PlannedStep{
		fakestep.Step("slow", vocab.TierMetrics, fakestep.Block(c, nil, nil)),
		fakestep.Step("later", vocab.TierTraces, fakestep.OK(c, nil)),
	}}
	var r recorder
	out := Run(context.Background(), plan, Input{RunID: "r"}, r.hooks())
	for _, id := range []string{"slow", "later"} {
		if got := r.get(id); got.Status != vocab.StatusFailed || got.Reason != "timeout" {
			t.Errorf("step %s = %s/%q (%s), want failed/timeout", id, got.Status, got.Reason, got.Error)
		}
	}
	if !strings.Contains(r.get("later").Error, "not started") || out.Status != "failed" {
		t.Fatalf("plan %s (%s); later: %q", out.Status, out.Reason, r.get("later").Error)
	}
}

// TestLaterStepsReadWhatMissed: a step of a later tier reads, in
// Input.Missed, what kept each earlier step without evidence from measuring
// (its failure's reason and error, or what is not configured); a step that
// succeeded, or failed with what it gathered, is evidence, not missed; and a
// not-configured step stops no later tier.
func TestLaterStepsReadWhatMissed(t *testing.T) {
	c := fakestep.NewCounter()
	var got map[string]string
	refused := vocab.Errorf(vocab.ReasonRefused, "dial 10.0.0.7:8000: not in targets.allow")
	plan := &playbooks.Plan{Playbook: "pb", Steps: []playbooks.PlannedStep{
		fakestep.Step("snapshot", vocab.TierMetrics, fakestep.Fail(c, vocab.NotConfigured("no Prometheus (set prometheus.url)"))),
		fakestep.Step("scrape", vocab.TierMetrics, fakestep.Fail(c, refused)),
		fakestep.Step("ok", vocab.TierMetrics, fakestep.OK(c, nil)),
		fakestep.Step("triage", vocab.TierTriage, fakestep.Func(func(_ context.Context, in *vocab.Input) (*vocab.Result, error) {
			got = in.Missed
			return &vocab.Result{}, nil
		})),
	}}
	plan.Steps[1].ContinueOnError = true
	var r recorder
	out := Run(context.Background(), plan, Input{RunID: "r"}, r.hooks())
	want := map[string]string{
		"snapshot": "not configured: no Prometheus (set prometheus.url)",
		"scrape":   "refused: dial 10.0.0.7:8000: not in targets.allow",
	}
	if len(got) != len(want) || got["snapshot"] != want["snapshot"] || got["scrape"] != want["scrape"] {
		t.Errorf("triage read Missed %q, want %q", got, want)
	}
	if st := r.get("snapshot"); st.Status != vocab.StatusNotConfigured || st.Reason != "no Prometheus (set prometheus.url)" {
		t.Errorf("snapshot %s/%q, want not-configured naming what is missing", st.Status, st.Reason)
	}
	if out.Status != vocab.StatusPartial || !strings.Contains(out.Reason, "scrape (refused)") || strings.Contains(out.Reason, "snapshot") {
		t.Errorf("plan %s (%s): want partial for the refused scrape alone", out.Status, out.Reason)
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
