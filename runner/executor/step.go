package executor

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/vocab"
)

// decision is gate's answer for one step.
type decision int

const (
	// proceed: the step runs.
	proceed decision = iota
	// settle: the step does not run; its record says why (status, reason, error).
	settle
	// drop: the run was interrupted; the step gets no record and runs on resume.
	drop
)

// gated is gate's answer: a decision and, for settle, the record's fields.
type gated struct {
	decision
	status          vocab.Status
	reason, errText string
}

func settled(status vocab.Status, reason, errText string) gated {
	return gated{decision: settle, status: status, reason: reason, errText: errText}
}

// runStep decides whether st runs (whenPrior: what its `when` sees), runs it
// under its deadline with prior as its Input.Prior and classifies the outcome.
// A result returned with an error is kept on the failed record (Partial). It
// returns nil when the step was cut short by ErrInterrupted.
func (ex *planExec) runStep(ctx context.Context, st *playbooks.PlannedStep, prior, whenPrior map[string]*vocab.Result, stopped string) *StepRecord {
	rec := &StepRecord{Plan: ex.plan.Playbook, ID: st.ID, Kind: st.Kind, Tier: st.Tier, StartedAt: ex.now()}
	finish := func(status vocab.Status, reason, errText string) *StepRecord {
		rec.Status, rec.Reason, rec.Error = status, reason, errText
		rec.FinishedAt = ex.now()
		rec.DurationMS = rec.FinishedAt.Sub(rec.StartedAt).Milliseconds()
		return rec
	}
	switch g := ex.gate(ctx, st, whenPrior, stopped); g.decision {
	case drop:
		return nil
	case settle:
		return finish(g.status, g.reason, g.errText)
	}
	if st.Step == nil {
		return finish(vocab.StatusFailed, string(vocab.ReasonInternal), fmt.Sprintf("step %s (%s) was never built", st.ID, st.Kind))
	}
	rec.StartedAt = ex.now()
	stepCtx, cancel := ex.stepContext(ctx, st)
	defer cancel(nil)
	res, err := ex.supervise(stepCtx, st, prior)
	if res != nil {
		rec.Summary, rec.Findings, rec.Signals = res.Summary, res.Findings, res.Signals
		rec.Verdict, rec.Profile, rec.Artifacts = res.Verdict, res.Profile, res.Artifacts
	}
	if err == nil {
		return finish(vocab.StatusSucceeded, "", "")
	}
	if why, ok := vocab.IsSkip(err); ok { // nothing to do here (opted out, refused by policy)
		return finish(vocab.StatusSkipped, why, "")
	}
	if what, ok := vocab.IsNotConfigured(err); ok { // something it needs is not configured
		return finish(vocab.StatusNotConfigured, what, "")
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
			return finish(vocab.StatusCancelled, string(vocab.ReasonCancelled), text)
		case errors.Is(stepCtx.Err(), context.DeadlineExceeded):
			return finish(vocab.StatusFailed, string(vocab.ReasonTimeout), text)
		}
	}
	return finish(vocab.StatusFailed, string(vocab.Classify(err)), err.Error())
}

// gate decides whether a step may run: not when the run was stopped, a failed
// step stopped the plan, the alert resolved (tier 3), its `when` is false, the
// step did not render (checked after `when`), or a hook says skip.
func (ex *planExec) gate(ctx context.Context, st *playbooks.PlannedStep, prior map[string]*vocab.Result, stopped string) gated {
	if ctx.Err() != nil {
		cause := context.Cause(ctx)
		switch {
		case errors.Is(cause, ErrInterrupted):
			return gated{decision: drop}
		case errors.Is(cause, ErrCancelled):
			return settled(vocab.StatusCancelled, string(vocab.ReasonCancelled), "not started: "+cause.Error())
		case errors.Is(ctx.Err(), context.DeadlineExceeded): // the plan ran out of time: a failure, said so
			return settled(vocab.StatusFailed, string(vocab.ReasonTimeout), "not started: "+cause.Error())
		}
		return settled(vocab.StatusSkipped, "not started: "+cause.Error(), "")
	}
	if stopped != "" {
		return settled(vocab.StatusSkipped, stopped, "")
	}
	if st.Tier == vocab.TierProfile && closed(ex.in.Resolved) {
		return settled(vocab.StatusSkipped, "alert resolved before this step", "")
	}
	// `when` first: a step it skips must not fail for a config it would never
	// have sent (a traces step rendered from a label the alert lacks, say).
	if st.When != nil {
		ok, err := evalWhen(st.When, ex.in, prior)
		if err != nil {
			return settled(vocab.StatusFailed, string(vocab.ReasonBadConfig), fmt.Sprintf("when: %s: %v", st.When.Source, err))
		}
		if !ok {
			return settled(vocab.StatusSkipped, fmt.Sprintf("when: %s is false", st.When.Source), "")
		}
	}
	if st.RenderErr != nil {
		return settled(vocab.StatusFailed, string(vocab.ReasonBadConfig), st.RenderErr.Error())
	}
	if ex.hooks.Skip != nil {
		if why := ex.hooks.Skip(ctx, ex.plan, st); why != "" {
			return settled(vocab.StatusSkipped, why, "")
		}
	}
	return gated{decision: proceed}
}

// stepContext is the step's context: its timeout and, in tier 3,
// cancellation when the alert resolves.
func (ex *planExec) stepContext(ctx context.Context, st *playbooks.PlannedStep) (context.Context, context.CancelCauseFunc) {
	stepCtx, cancel := context.WithCancelCause(ctx)
	if st.Timeout > 0 {
		var cancelT context.CancelFunc
		stepCtx, cancelT = context.WithTimeoutCause(stepCtx, st.Timeout,
			fmt.Errorf("step %s (%s) ran longer than its timeout %s", st.ID, st.Kind, st.Timeout))
		inner := cancel
		cancel = func(cause error) { inner(cause); cancelT() } // the cause first: the child inherits it
	}
	if st.Tier == vocab.TierProfile && ex.in.Resolved != nil {
		go func() {
			select {
			case <-ex.in.Resolved:
				cancel(ErrResolved)
			case <-stepCtx.Done():
			}
		}()
	}
	return stepCtx, cancel
}

// supervise runs the step and waits for it, but not for ever: once the step's
// context is done (its deadline, the plan's, a cancel or an interruption) the
// step has AbandonGrace to return. A step that ignores its context is then
// abandoned with an error saying so, and reported through Hooks.Abandoned
// until its goroutine returns; whatever it returns later is discarded.
func (ex *planExec) supervise(stepCtx context.Context, st *playbooks.PlannedStep, prior map[string]*vocab.Result) (*vocab.Result, error) {
	type result struct {
		res *vocab.Result
		err error
	}
	done := make(chan result, 1) // buffered: an abandoned step's send never blocks
	go func() {
		res, err := ex.invoke(stepCtx, st, prior)
		done <- result{res, err}
	}()
	select {
	case r := <-done:
		return r.res, r.err
	case <-stepCtx.Done():
	}
	wait := ex.in.AbandonGrace
	if w, ok := st.Step.(winder); ok {
		wait = max(wait, w.WindDown())
	}
	grace := time.NewTimer(wait)
	defer grace.Stop()
	select {
	case r := <-done:
		return r.res, r.err
	case <-grace.C:
	}
	ex.in.Log.Error("A step ignored its context past its deadline; abandoning it.",
		zap.String("run", ex.in.RunID), zap.String("plan", ex.plan.Playbook), zap.String("step", st.ID),
		zap.String("kind", st.Kind), zap.Duration("grace", wait))
	if ex.hooks.Abandoned != nil {
		ex.hooks.Abandoned(st.Kind, +1)
		go func() {
			<-done
			ex.hooks.Abandoned(st.Kind, -1)
		}()
	}
	return nil, vocab.Errorf(vocab.ReasonTimeout, "step %s (%s) did not return within %s of its context ending: abandoned",
		st.ID, st.Kind, wait)
}

// invoke runs the step, recovering a panic as an internal failure.
func (ex *planExec) invoke(stepCtx context.Context, st *playbooks.PlannedStep, prior map[string]*vocab.Result) (res *vocab.Result, err error) {
	log := ex.in.Log.With(zap.String("run", ex.in.RunID), zap.String("plan", ex.plan.Playbook), zap.String("step", st.ID))
	in := &vocab.Input{RunID: ex.in.RunID, Plan: ex.plan.Playbook, StepID: st.ID, Attempt: ex.in.Attempt, RunCreated: ex.in.Created,
		Alert: ex.in.Alert, Window: ex.in.Window,
		Prior: prior, Missed: ex.missedView(), Env: ex.in.Env, Log: log}
	defer func() {
		if p := recover(); p != nil {
			log.Error("Step panicked.", zap.Any("panic", p), zap.ByteString("stack", debug.Stack()))
			err = vocab.Errorf(vocab.ReasonInternal, "step %s (%s) panicked: %v", st.ID, st.Kind, p)
		}
	}()
	return st.Step.Run(stepCtx, in)
}

// evalWhen evaluates a step's condition, turning a panic into an error.
func evalWhen(c *playbooks.Condition, in Input, prior map[string]*vocab.Result) (ok bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("evaluation panicked: %v", p)
		}
	}()
	return c.Eval(in.Alert, prior)
}

// winder is a step that owes the outside world an undo once its context ends
// and says how long that may take: the profile step sends stop_profile on
// every path, and the stop flushes for minutes (its stop_timeout), then
// collects what was written. Run waits that long, not AbandonGrace, so the
// step's record says what it stopped and kept (a capture cut by the alert's
// resolution: cancelled, with the partial profile) instead of "abandoned".
type winder interface{ WindDown() time.Duration }
