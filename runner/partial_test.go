package runner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/capture"
	"github.com/autocapture/autocapture/playbooks"
)

// partialStep fails the way the scrape step does when its deadline expires in
// the gap (or the http step on a refusal): with the evidence it gathered AND an
// error. With wait it blocks until its context ends and returns ctx's error.
func partialStep(c *counter, wait bool, err error) capture.Step {
	return funcStep(func(ctx context.Context, in *capture.Input) (*capture.Result, error) {
		defer c.enter(in.RunID + "/" + in.StepID)()
		res := &capture.Result{Summary: "scrape of 127.0.0.1:8000 (one scrape: lifetime histograms, no rates)",
			Findings:  map[string]any{"second_scrape_error": "stopped", "target": "127.0.0.1:8000"},
			Signals:   capture.Signals{capture.SigKVUsage: 0.97},
			Artifacts: []capture.Artifact{{Name: "scrape-1.txt", Key: "runs/x/scrape-1.txt"}}}
		if wait {
			<-ctx.Done()
			return res, fmt.Errorf("scrape: stopped after the first scrape: %w", ctx.Err())
		}
		return res, err
	})
}

// priorReader records the signals and ids it was given, as triage reads them.
func priorReader(seen chan<- map[string]*capture.Result) capture.Step {
	return funcStep(func(_ context.Context, in *capture.Input) (*capture.Result, error) {
		seen <- in.Prior
		return &capture.Result{Summary: "read"}, nil
	})
}

func TestRunPlanKeepsResultOfFailedStep(t *testing.T) {
	refused := capture.Errorf(capture.ReasonRefused, "http 127.0.0.1:9: refused by the targets allow-list")
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
			c := newCounter()
			seen := make(chan map[string]*capture.Result, 1)
			scrape := step("scrape", capture.TierMetrics, partialStep(c, tc.wait, tc.err))
			scrape.Timeout, scrape.ContinueOnError = 30*time.Millisecond, true
			// when sees succeeded steps only (playbooks.Env): the failed scrape is absent.
			guarded := step("guarded", capture.TierTraces, okStep(c, nil))
			guarded.When = when(`steps.scrape.target == "127.0.0.1:8000"`)
			plan := &playbooks.Plan{Playbook: "pb", Steps: []playbooks.PlannedStep{
				scrape, step("triage", capture.TierTriage, priorReader(seen)), guarded}}
			var r recorder
			out := RunPlan(context.Background(), plan, PlanInput{RunID: "r"}, r.hooks())
			rec := r.get("scrape")
			if rec.Status != StepFailed || rec.Reason != tc.reason || !strings.Contains(rec.Error, tc.errH) {
				t.Fatalf("scrape = %s/%s %q, want failed/%s with %q", rec.Status, rec.Reason, rec.Error, tc.reason, tc.errH)
			}
			if !rec.Partial || rec.Summary == "" || rec.Findings["target"] != "127.0.0.1:8000" ||
				rec.Signals[capture.SigKVUsage] != 0.97 || len(rec.Artifacts) != 1 {
				t.Errorf("failed scrape's record lost its result: %+v", rec)
			}
			prior := waitFor(t, seen, "triage to run")
			if got := prior["scrape"]; got == nil || got.Signals[capture.SigKVUsage] != 0.97 {
				t.Errorf("triage's prior = %v, want the failed scrape's first-scrape signals", prior)
			}
			if g := r.get("guarded"); g.Status != StepSkipped {
				t.Errorf("guarded = %s (%s); when must not see a failed step", g.Status, g.Reason)
			}
			if out.Status != "partial" {
				t.Errorf("plan %s, want partial", out.Status)
			}
		})
	}
}

func TestRunPlanResumedFailedStepStillEvidence(t *testing.T) {
	seen := make(chan map[string]*capture.Result, 1)
	plan := &playbooks.Plan{Playbook: "pb", Steps: []playbooks.PlannedStep{
		step("scrape", capture.TierMetrics, failStep(newCounter(), errors.New("must not run again"))),
		step("bare", capture.TierMetrics, failStep(newCounter(), errors.New("must not run again"))),
		step("triage", capture.TierTriage, priorReader(seen)),
	}}
	plan.Steps[0].ContinueOnError, plan.Steps[1].ContinueOnError = true, true
	done := map[string]StepRecord{
		"scrape": {Plan: "pb", ID: "scrape", Status: StepFailed, Reason: "timeout", Partial: true,
			Signals: capture.Signals{capture.SigQueueDepth: 40}},
		"bare": {Plan: "pb", ID: "bare", Status: StepFailed, Reason: "refused"},
	}
	RunPlan(context.Background(), plan, PlanInput{RunID: "r", Done: done}, Hooks{})
	prior := waitFor(t, seen, "triage to run")
	if got := prior["scrape"]; got == nil || got.Signals[capture.SigQueueDepth] != 40 {
		t.Errorf("after resume triage's prior = %v, want the persisted partial scrape", prior)
	}
	if _, ok := prior["bare"]; ok {
		t.Error("a failed step that returned nothing reached triage's prior")
	}
}

// TestFailedStepResultPersistedAndReplied: the store and the thread keep what a
// failed step gathered.
func TestFailedStepResultPersistedAndReplied(t *testing.T) {
	forEachStore(t, func(t *testing.T, db dbRef) {
		c := newCounter()
		n := &recNotifier{}
		p := planner(func() playbooks.PlannedStep {
			s := step("scrape", capture.TierMetrics, partialStep(c, true, nil))
			s.Timeout = 50 * time.Millisecond
			return s
		})
		s := newService(t, db, p, true, func(o *Options) { o.Notifier = n })
		id := acceptOne(t, s, firing("fp", time.Now().UTC())).RunID
		r := waitRun(t, s, id, "finished", isFinished)
		rec := stepByID(r, "scrape")
		if r.Status != StatusFailed || rec.Status != StepFailed || rec.Reason != "timeout" || !rec.Partial {
			t.Fatalf("run %s, scrape %s/%s partial=%v; want failed, failed/timeout, partial", r.Status, rec.Status, rec.Reason, rec.Partial)
		}
		if rec.Summary == "" || rec.Signals[capture.SigKVUsage] != 0.97 || rec.Findings["second_scrape_error"] != "stopped" ||
			len(rec.Artifacts) != 1 {
			t.Errorf("stored record lost the step's result: %+v", rec)
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		var rep *struct{ summary, errText string }
		for _, x := range n.replies {
			if x.StepID == "scrape" {
				rep = &struct{ summary, errText string }{x.Summary, x.Error}
			}
		}
		if rep == nil || rep.summary != rec.Summary || !strings.Contains(rep.errText, "ran longer than its timeout") {
			t.Fatalf("thread reply %+v, want the summary and the error", rep)
		}
	})
}
