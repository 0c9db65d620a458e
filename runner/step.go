package runner

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/capture"
	"github.com/autocapture/autocapture/playbooks"
)

// stepInterrupted is gate's answer for a run cut short by ErrInterrupted.
const stepInterrupted = "interrupted"

// runStep decides whether st runs (whenPrior: what its `when` sees), runs it
// under its deadline with prior as its Input.Prior and classifies the outcome.
// A result returned with an error is kept on the failed record (Partial). It
// returns nil when the step was cut short by ErrInterrupted.
func (ex *planExec) runStep(ctx context.Context, st *playbooks.PlannedStep, prior, whenPrior map[string]*capture.Result, stopped string) *StepRecord {
	start := ex.now()
	rec := &StepRecord{Plan: ex.plan.Playbook, ID: st.ID, Kind: st.Kind, Tier: st.Tier, StartedAt: start}
	finish := func(status, reason, errText string) *StepRecord {
		rec.Status, rec.Reason, rec.Error = status, reason, errText
		rec.FinishedAt = ex.now()
		rec.DurationMS = rec.FinishedAt.Sub(rec.StartedAt).Milliseconds()
		return rec
	}
	if status, reason, errText, skip := ex.gate(ctx, st, whenPrior, stopped); status == stepInterrupted {
		return nil
	} else if skip {
		return finish(status, reason, errText)
	}
	if st.Step == nil {
		return finish(StepFailed, string(capture.ReasonInternal), fmt.Sprintf("step %s (%s) was never built", st.ID, st.Kind))
	}
	rec.StartedAt = ex.now()
	res, err, stepCtx := ex.invoke(ctx, st, prior)
	if res != nil {
		rec.Summary, rec.Findings, rec.Signals = res.Summary, res.Findings, res.Signals
		rec.Verdict, rec.Artifacts = res.Verdict, res.Artifacts
	}
	if err == nil {
		return finish(StepSucceeded, "", "")
	}
	if why, ok := capture.IsSkip(err); ok { // nothing to do here (an optional backend is off)
		return finish(StepSkipped, why, "")
	}
	rec.Partial = res != nil
	if stepCtx.Err() != nil {
		cause := context.Cause(stepCtx)
		text := err.Error()
		if cause != nil && !strings.Contains(text, cause.Error()) {
			text += " (" + cause.Error() + ")"
		}
		switch {
		case errors.Is(cause, ErrInterrupted):
			return nil
		case errors.Is(cause, ErrCancelled), errors.Is(cause, ErrResolved):
			return finish(StepCancelled, string(capture.ReasonCancelled), text)
		case errors.Is(stepCtx.Err(), context.DeadlineExceeded):
			return finish(StepFailed, string(capture.ReasonTimeout), text)
		}
	}
	return finish(StepFailed, string(capture.Classify(err)), err.Error())
}

// gate decides whether a step may run: not when the run was stopped, a failed
// step stopped the plan, the alert resolved (tier 3), its `when` is false, the
// step did not render (checked after `when`), or a hook says skip. skip reports the record's status,
// reason and error; stepInterrupted means no record at all.
func (ex *planExec) gate(ctx context.Context, st *playbooks.PlannedStep, prior map[string]*capture.Result, stopped string) (status, reason, errText string, skip bool) {
	if ctx.Err() != nil {
		cause := context.Cause(ctx)
		switch {
		case errors.Is(cause, ErrInterrupted):
			return stepInterrupted, "", "", true
		case errors.Is(cause, ErrCancelled):
			return StepCancelled, string(capture.ReasonCancelled), "not started: " + cause.Error(), true
		case errors.Is(ctx.Err(), context.DeadlineExceeded): // the plan ran out of time: a failure, said so
			return StepFailed, string(capture.ReasonTimeout), "not started: " + cause.Error(), true
		}
		return StepSkipped, "not started: " + cause.Error(), "", true
	}
	if stopped != "" {
		return StepSkipped, stopped, "", true
	}
	if st.Tier == capture.TierProfile && closed(ex.in.Resolved) {
		return StepSkipped, "alert resolved before this step", "", true
	}
	// `when` first: a step it skips must not fail for a config it would never
	// have sent (a traces step rendered from a label the alert lacks, say).
	if st.When != nil {
		ok, err := evalWhen(st.When, ex.in, prior)
		if err != nil {
			return StepFailed, string(capture.ReasonBadConfig), fmt.Sprintf("when: %s: %v", st.When.Source, err), true
		}
		if !ok {
			return StepSkipped, fmt.Sprintf("when: %s is false", st.When.Source), "", true
		}
	}
	if st.RenderErr != nil {
		return StepFailed, string(capture.ReasonBadConfig), st.RenderErr.Error(), true
	}
	if ex.hooks.Skip != nil {
		if why := ex.hooks.Skip(ctx, ex.plan, st); why != "" {
			return StepSkipped, why, "", true
		}
	}
	return "", "", "", false
}

// invoke runs the step with its deadline (and, in tier 3, cancellation on
// resolve), recovering a panic as an internal failure. It returns the step's
// context so the caller can read why it ended.
func (ex *planExec) invoke(ctx context.Context, st *playbooks.PlannedStep, prior map[string]*capture.Result) (res *capture.Result, err error, stepCtx context.Context) {
	stepCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if st.Timeout > 0 {
		var cancelT context.CancelFunc
		stepCtx, cancelT = context.WithTimeoutCause(stepCtx, st.Timeout,
			fmt.Errorf("step %s (%s) ran longer than its timeout %s", st.ID, st.Kind, st.Timeout))
		defer cancelT()
	}
	if st.Tier == capture.TierProfile && ex.in.Resolved != nil {
		go func() {
			select {
			case <-ex.in.Resolved:
				cancel(ErrResolved)
			case <-stepCtx.Done():
			}
		}()
	}
	log := ex.in.Log.With(zap.String("run", ex.in.RunID), zap.String("plan", ex.plan.Playbook), zap.String("step", st.ID))
	in := &capture.Input{RunID: ex.in.RunID, StepID: st.ID, Alert: ex.in.Alert, Window: ex.in.Window,
		Prior: prior, Env: ex.in.Env, Log: log}
	defer func() {
		if p := recover(); p != nil {
			log.Error("Step panicked.", zap.Any("panic", p), zap.ByteString("stack", debug.Stack()))
			err = capture.Errorf(capture.ReasonInternal, "step %s (%s) panicked: %v", st.ID, st.Kind, p)
		}
	}()
	res, err = st.Step.Run(stepCtx, in)
	return res, err, stepCtx
}

// evalWhen evaluates a step's condition, turning a panic into an error.
func evalWhen(c *playbooks.Condition, in PlanInput, prior map[string]*capture.Result) (ok bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("evaluation panicked: %v", p)
		}
	}()
	return c.Eval(in.Alert, prior)
}

// planStatus sums up a plan's step records.
func planStatus(recs []StepRecord) (status, reason string) {
	var ok, failed, cancelled int
	var bad []string
	for _, r := range recs {
		switch r.Status {
		case StepSucceeded:
			ok++
		case StepFailed:
			failed++
			bad = append(bad, fmt.Sprintf("%s (%s)", r.ID, r.Reason))
		case StepCancelled:
			cancelled++
			bad = append(bad, fmt.Sprintf("%s (cancelled)", r.ID))
		}
	}
	switch {
	case failed == 0 && cancelled == 0:
		return "succeeded", ""
	case ok > 0:
		return "partial", fmt.Sprintf("%d of %d steps did not finish: %s", failed+cancelled, len(recs), strings.Join(bad, ", "))
	}
	return "failed", fmt.Sprintf("no step succeeded: %s", strings.Join(bad, ", "))
}

func closed(ch <-chan struct{}) bool {
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func interrupted(ctx context.Context) bool {
	return ctx.Err() != nil && errors.Is(context.Cause(ctx), ErrInterrupted)
}
