package executor

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/vocab"
)

func TestRunPlanKeepsResultOfFailedStep(t *testing.T) {
	refused := vocab.Errorf(vocab.ReasonRefused, "http 127.0.0.1:9: refused by the targets allow-list")
	cases := []struct {
		name         string
		wait         bool
		err          error
		reason, errH string
	}{
		{name: "deadline in the gap", wait: true, reason: "timeout", errH: "ran longer than its timeout"},
		{name: "refusal", err: refused, reason: "refused", errH: "refused by the targets allow-list"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := fakestep.NewCounter()
			seen := make(chan map[string]*vocab.Result, 1)
			scrape := fakestep.Step("scrape", vocab.TierMetrics, fakestep.Partial(c, tc.wait, tc.err))
			scrape.Timeout, scrape.ContinueOnError = 30*time.Millisecond, true
			// when sees succeeded steps only (playbooks.Env): the failed scrape is absent.
			guarded := fakestep.Step("guarded", vocab.TierTraces, fakestep.OK(c, nil))
			guarded.When = fakestep.When(`steps.scrape.target == "127.0.0.1:8000"`)
			plan := &playbooks.Plan{Playbook: "pb", Steps: []playbooks.PlannedStep{
				scrape, fakestep.Step("triage", vocab.TierTriage, fakestep.PriorReader(seen)), guarded}}
			var r recorder
			out := Run(context.Background(), plan, Input{RunID: "r"}, r.hooks())
			rec := r.get("scrape")
			if rec.Status != vocab.StatusFailed || rec.Reason != tc.reason || !strings.Contains(rec.Error, tc.errH) {
				t.Fatalf("scrape = %s/%s %q, want failed/%s with %q", rec.Status, rec.Reason, rec.Error, tc.reason, tc.errH)
			}
			if !rec.Partial || rec.Summary == "" || rec.Findings["target"] != "127.0.0.1:8000" ||
				rec.Signals[vocab.SigKVUsage] != 0.97 || len(rec.Artifacts) != 1 {
				t.Errorf("failed scrape's record lost its result: %+v", rec)
			}
			prior := fakestep.WaitFor(t, seen, "triage to run")
			if got := prior["scrape"]; got == nil || got.Signals[vocab.SigKVUsage] != 0.97 {
				t.Errorf("triage's prior = %v, want the failed scrape's first-scrape signals", prior)
			}
			if g := r.get("guarded"); g.Status != vocab.StatusSkipped {
				t.Errorf("guarded = %s (%s); when must not see a failed step", g.Status, g.Reason)
			}
			if out.Status != "partial" {
				t.Errorf("plan %s, want partial", out.Status)
			}
		})
	}
}

func TestRunPlanResumedFailedStepStillEvidence(t *testing.T) {
	seen := make(chan map[string]*vocab.Result, 1)
	plan := &playbooks.Plan{Playbook: "pb", Steps: []playbooks.PlannedStep{
		fakestep.Step("scrape", vocab.TierMetrics, fakestep.Fail(fakestep.NewCounter(), errors.New("must not run again"))),
		fakestep.Step("bare", vocab.TierMetrics, fakestep.Fail(fakestep.NewCounter(), errors.New("must not run again"))),
		fakestep.Step("triage", vocab.TierTriage, fakestep.PriorReader(seen)),
	}}
	plan.Steps[0].ContinueOnError, plan.Steps[1].ContinueOnError = true, true
	done := map[string]StepRecord{
		"scrape": {Plan: "pb", ID: "scrape", Status: vocab.StatusFailed, Reason: "timeout", Partial: true,
			Signals: vocab.Signals{vocab.SigQueueDepth: 40}},
		"bare": {Plan: "pb", ID: "bare", Status: vocab.StatusFailed, Reason: "refused"},
	}
	Run(context.Background(), plan, Input{RunID: "r", Done: done}, Hooks{})
	prior := fakestep.WaitFor(t, seen, "triage to run")
	if got := prior["scrape"]; got == nil || got.Signals[vocab.SigQueueDepth] != 40 {
		t.Errorf("after resume triage's prior = %v, want the persisted partial scrape", prior)
	}
	if _, ok := prior["bare"]; ok {
		t.Error("a failed step that returned nothing reached triage's prior")
	}
}
