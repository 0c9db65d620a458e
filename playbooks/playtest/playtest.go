// Package playtest runs the tests: blocks of playbook files (`autocapture test`):
// each case's alert is matched against its file's playbooks, the plans run through
// the runner's own DB-free core (runner.RunPlan) with mocked steps replaced by
// their canned results, and the outcome is compared with the expectations.
// Nothing leaves the process: unmocked steps see an Env with no Prometheus, no
// trace backend and no target client, and fail with bad-config if they need one.
package playtest

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/vocab"
)

// Lookback and Lag place a case's window around its alert: [startsAt-Lookback,
// startsAt+Lag], like a run that begins shortly after the alert fires.
const (
	Lookback = 10 * time.Minute
	Lag      = time.Minute
)

// Outcome is one case's result.
type Outcome struct {
	Case *playbooks.TestCase
	// Failures lists every expectation that did not hold; empty means pass.
	Failures []string
	// Steps are the step records of every plan, in plan order.
	Steps []executor.StepRecord
}

// Passed says whether every expectation held.
func (o *Outcome) Passed() bool { return len(o.Failures) == 0 }

// Where is the case's file:line.
func (o *Outcome) Where() string { return fmt.Sprintf("%s:%d", o.Case.File, o.Case.Line) }

// Run runs one case. store receives artifacts of unmocked steps (nil: none).
func Run(ctx context.Context, tc *playbooks.TestCase, store vocab.Store, log *zap.Logger) *Outcome {
	out := &Outcome{Case: tc}
	w := vocab.Window{Start: tc.Alert.StartsAt.Add(-Lookback), End: tc.Alert.StartsAt.Add(Lag)}
	env := &vocab.Env{Store: store, Now: func() time.Time { return w.End }}
	matched := playbooks.Match(tc.Playbooks, tc.Alert.Labels)
	var names []string
	var verdict *vocab.Verdict
	for _, pb := range matched {
		names = append(names, pb.Name)
		plan := pb.Plan(tc.Alert, w)
		mock(plan, tc.Mocks)
		res := executor.Run(ctx, plan, executor.Input{RunID: "test", Created: w.End, Alert: tc.Alert, Window: w,
			Env: env, Log: log, DefaultTimeout: time.Minute, Now: env.Now}, executor.Hooks{})
		out.Steps = append(out.Steps, res.Steps...)
		if res.Verdict != nil && verdict == nil {
			verdict = res.Verdict
		}
	}
	out.Failures = check(tc, names, out.Steps, verdict)
	return out
}

// mock replaces mocked steps of a plan by their canned results. A mock keyed
// playbook/step applies to that playbook only; a bare step id to every plan.
func mock(plan *playbooks.Plan, mocks map[string]playbooks.MockSpec) {
	for i := range plan.Steps {
		st := &plan.Steps[i]
		m, ok := mocks[plan.Playbook+"/"+st.ID]
		if !ok {
			m, ok = mocks[st.ID]
		}
		if ok && st.RenderErr == nil {
			st.Step = canned{m}
		}
	}
}

// canned is a step that returns a mock's result.
type canned struct{ m playbooks.MockSpec }

func (c canned) Run(context.Context, *vocab.Input) (*vocab.Result, error) { return c.m.Result() }

// check compares what happened with the case's expectations.
func check(tc *playbooks.TestCase, matched []string, recs []executor.StepRecord, verdict *vocab.Verdict) []string {
	var fails []string
	ex := tc.Expect
	if ex.Playbooks != nil && !slices.Equal(ex.Playbooks, matched) {
		fails = append(fails, fmt.Sprintf("matched playbooks %v, want %v", matched, ex.Playbooks))
	}
	got := map[vocab.Status][]string{}
	status := map[string]executor.StepRecord{}
	const ran vocab.Status = "ran" // succeeded or failed: the step ran
	for _, r := range recs {
		kind := r.Status
		if kind == vocab.StatusSucceeded {
			kind = ran
		}
		got[kind] = append(got[kind], r.ID)
		if kind == vocab.StatusFailed {
			got[ran] = append(got[ran], r.ID)
		}
		status[r.ID], status[r.Plan+"/"+r.ID] = r, r
	}
	for _, e := range []struct {
		what       string
		want, have []string
	}{{"ran", ex.Ran, got[ran]}, {"skipped", ex.Skipped, got[vocab.StatusSkipped]}, {"failed", ex.Failed, got[vocab.StatusFailed]},
		{"not_configured", ex.NotConfigured, got[vocab.StatusNotConfigured]}} {
		if e.want != nil && !sameSet(e.want, e.have) {
			fails = append(fails, fmt.Sprintf("%s %v, want %v%s", e.what, sorted(e.have), sorted(e.want), why(e.want, status)))
		}
	}
	if ex.Verdict != "" {
		switch {
		case verdict == nil:
			fails = append(fails, fmt.Sprintf("no verdict, want %s", ex.Verdict))
		case verdict.ID != ex.Verdict:
			fails = append(fails, fmt.Sprintf("verdict %s, want %s (evidence: %s)", verdict.ID, ex.Verdict, strings.Join(verdict.Evidence, "; ")))
		}
	}
	ids := make([]string, 0, len(ex.SummaryContains))
	for id := range ex.SummaryContains {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		r, ok := status[id]
		switch {
		case !ok:
			fails = append(fails, fmt.Sprintf("summary of %s: the step did not run", id))
		case !strings.Contains(r.Summary, ex.SummaryContains[id]):
			fails = append(fails, fmt.Sprintf("summary of %s is %q, want it to contain %q", id, r.Summary, ex.SummaryContains[id]))
		}
	}
	return fails
}

// sameSet compares step ids; a want entry may be playbook/step.
func sameSet(want, have []string) bool {
	norm := func(id string) string {
		if _, step, ok := strings.Cut(id, "/"); ok {
			return step
		}
		return id
	}
	a := make([]string, len(want))
	for i, w := range want {
		a[i] = norm(w)
	}
	return slices.Equal(sorted(a), sorted(have))
}

func sorted(s []string) []string {
	c := slices.Clone(s)
	sort.Strings(c)
	return c
}

// why adds each wanted step's actual status and reason, to make a failure readable.
func why(want []string, status map[string]executor.StepRecord) string {
	var parts []string
	for _, id := range want {
		if r, ok := status[id]; ok {
			detail := string(r.Status)
			if r.Reason != "" {
				detail += ": " + r.Reason
			}
			if r.Error != "" {
				detail += ": " + r.Error
			}
			parts = append(parts, id+" "+detail)
		} else {
			parts = append(parts, id+" has no record")
		}
	}
	return " (" + strings.Join(parts, "; ") + ")"
}
