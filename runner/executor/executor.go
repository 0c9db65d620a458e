// Package executor runs one plan: tiers in order, the steps of a tier in
// parallel, each under its deadline, `when` evaluated against what ran before.
// It holds no database and no queue: the durable service (package runner)
// records steps through Hooks, and `autocapture test` runs playbooks through it
// offline.
package executor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/prometheus/alertmanager/template"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/internal/clip"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/vocab"
)

// Causes a run's context is cancelled with. Run tells them apart through
// context.Cause, so the reason a step stopped reaches its record.
var (
	// ErrInterrupted: this process stops working on the run (shutdown past its grace,
	// a lost lease, a step it could not record). Steps it cut short are not
	// recorded: they run again on resume.
	ErrInterrupted = errors.New("run interrupted: it resumes elsewhere or after restart")
	// ErrCancelled: someone asked for the run to be cancelled.
	ErrCancelled = errors.New("run cancelled on request")
	// ErrResolved: the alert resolved; only tier-3 steps are cancelled with it.
	ErrResolved = errors.New("alert resolved")
	// ErrNotRecorded: StepDone could not record a finished step. The plan stops
	// as interrupted (the step runs again on resume); errors.Is(err,
	// ErrInterrupted) holds for it too.
	ErrNotRecorded = fmt.Errorf("%w: a finished step could not be recorded", ErrInterrupted)
)

// DefaultAbandonGrace is how long a step may run past its deadline (or its
// run's cancellation) before Run stops waiting for it.
const DefaultAbandonGrace = 5 * time.Second

// Input is what one plan runs with.
type Input struct {
	RunID string
	// Attempt is the run's attempt, 1 on its first start (0: unknown, as 1).
	Attempt int
	// Created is when the run was accepted (vocab.Input.RunCreated).
	Created time.Time
	Alert   template.Alert
	Window  vocab.Window
	Env     *vocab.Env
	Log     *zap.Logger
	// Done holds this plan's steps recorded by an earlier attempt, by step id:
	// they are not run again and their results feed `when` and Prior.
	Done map[string]StepRecord
	// Resolved is closed when the alert resolves: tier-3 steps in progress are
	// cancelled (cause ErrResolved) and those not yet started are skipped. Nil: never.
	Resolved <-chan struct{}
	// DefaultTimeout bounds a plan that sets no Timeout (0: unbounded).
	DefaultTimeout time.Duration
	// Started is when the run first started: the plan's timeout counts from it,
	// across attempts, so a run resumed after crashes cannot run for ever.
	// Zero means now.
	Started time.Time
	// AbandonGrace is how long a step that ignores its context is waited for
	// past its deadline; 0 means DefaultAbandonGrace.
	AbandonGrace time.Duration
	// Now is the clock of the records; nil means time.Now. Deadlines use the
	// real clock.
	Now func() time.Time
}

// Hooks are how Run's caller records steps. Every field is optional.
type Hooks struct {
	// Skip returns a reason to skip a step that would otherwise run (a step
	// cooldown, say); "" lets it run.
	Skip func(ctx context.Context, plan *playbooks.Plan, st *playbooks.PlannedStep) string
	// StepDone records a step as soon as it has finished. Steps of one tier
	// call it concurrently. An error stops the plan as interrupted
	// (ErrNotRecorded): a step that is not recorded must not let the run end
	// as if it had been.
	StepDone func(ctx context.Context, rec StepRecord) error
	// Abandoned is told +1 when Run stops waiting for a step of this kind that
	// ignored its context, and -1 when that step's goroutine finally returns.
	Abandoned func(kind string, delta int)
	// Preliminary records a verdict reached before tier 1 finished
	// (preliminary.go): called after the StepDone of the step that brought
	// its evidence, one call at a time. An error is logged, never fatal.
	Preliminary func(ctx context.Context, v Preliminary) error
}

// StepRecord is one step's outcome, as stored on the run and shown by the API.
type StepRecord struct {
	Plan     string         `json:"plan"`
	ID       string         `json:"id"`
	Kind     string         `json:"kind"`
	Tier     vocab.Tier     `json:"tier"`
	Status   vocab.Status   `json:"status"`
	Reason   string         `json:"reason,omitempty"`
	Error    string         `json:"error,omitempty"`
	Summary  string         `json:"summary,omitempty"`
	Findings map[string]any `json:"findings,omitempty"`
	Signals  vocab.Signals  `json:"signals,omitempty"`
	Verdict  *vocab.Verdict `json:"verdict,omitempty"`
	// Profile is a profile step's finding, which refines the run's verdict.
	Profile   *vocab.ProfileFinding `json:"profile,omitempty"`
	Artifacts []vocab.Artifact      `json:"artifacts,omitempty"`
	// Partial: the step returned what it had gathered together with its error
	// (a scrape cut short after its first read, queries that all failed, a
	// refused request, a frame cancelled on resolve); Summary to Artifacts hold
	// it, and when the step failed later steps read it as Prior.
	Partial    bool      `json:"partial,omitempty"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	DurationMS int64     `json:"duration_ms"`
}

// Result returns the record's findings as the vocab.Result later steps read.
func (r StepRecord) Result() *vocab.Result {
	return &vocab.Result{Summary: r.Summary, Findings: r.Findings, Signals: r.Signals,
		Verdict: r.Verdict, Profile: r.Profile, Artifacts: r.Artifacts}
}

// evidence says whether later steps read this record as Prior: a succeeded
// step, or a failed one that returned what it had gathered (its signals are
// real: triage counts a scrape's first read after the deadline cut the second).
// `when` sees succeeded steps only (playbooks.Env: a failed step is absent).
func (r StepRecord) evidence() bool {
	return r.Status == vocab.StatusSucceeded || (r.Status == vocab.StatusFailed && r.Partial)
}

// missedText is what a step that gave no evidence says of itself, short:
// "not configured: no Prometheus (set prometheus.url)", "unreachable:
// dial tcp …: connection refused".
func (r StepRecord) missedText() string {
	if r.Status == vocab.StatusNotConfigured {
		return "not configured: " + r.Reason
	}
	text := r.Reason
	if r.Error != "" {
		text += ": " + clip.Line(r.Error, 200)
	}
	return text
}

// missedView copies missed for a step's Input.
func (ex *planExec) missedView() map[string]string {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	return maps.Clone(ex.missed)
}

// Outcome is how a plan ended.
type Outcome struct {
	Plan string
	// Status is succeeded, partial, failed or cancelled.
	Status vocab.Status
	// Reason says why the status is not succeeded.
	Reason string
	// Steps holds every step of the plan that has a record, in plan order.
	Steps []StepRecord
	// Verdict is the triage verdict, if a step produced one.
	Verdict *vocab.Verdict
	// Interrupted: the run's context was cancelled with ErrInterrupted (or a
	// step could not be recorded); the plan did not finish and Status is
	// meaningless. Cause says why.
	Interrupted bool
	Cause       error
}

// Run runs one plan: tiers in order, the steps of a tier in parallel, each
// under its own deadline; a step's `when` is evaluated against the results of the
// steps before it; a failed step without continue_on_error stops the later tiers.
func Run(ctx context.Context, plan *playbooks.Plan, in Input, hooks Hooks) Outcome {
	if in.Log == nil {
		in.Log = zap.NewNop()
	}
	if in.AbandonGrace <= 0 {
		in.AbandonGrace = DefaultAbandonGrace
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if timeout := planTimeout(plan, in); timeout > 0 {
		started := in.Started
		if started.IsZero() {
			started = time.Now()
		}
		var cancelT context.CancelFunc
		ctx, cancelT = context.WithDeadlineCause(ctx, started.Add(timeout),
			fmt.Errorf("playbook %s ran longer than its timeout %s", plan.Playbook, timeout))
		defer cancelT()
	}
	ex := &planExec{plan: plan, in: in, hooks: hooks, stop: cancel,
		prior: map[string]*vocab.Result{}, succeeded: map[string]bool{}, missed: map[string]string{}}
	for _, rec := range in.Done {
		ex.keep(rec)
	}
	byID := map[string]StepRecord{}
	stopped := ""
	for _, tier := range vocab.Tiers {
		var steps []*playbooks.PlannedStep
		for i := range plan.Steps {
			if plan.Steps[i].Tier == tier {
				steps = append(steps, &plan.Steps[i])
			}
		}
		if len(steps) == 0 {
			continue
		}
		for _, rec := range ex.runTier(ctx, steps, stopped) {
			byID[rec.ID] = rec
			if rec.Status == vocab.StatusFailed && stopped == "" && !ex.step(rec.ID).ContinueOnError {
				stopped = fmt.Sprintf("step %s failed earlier", rec.ID)
			}
		}
		if interrupted(ctx) {
			return Outcome{Plan: plan.Playbook, Interrupted: true, Cause: context.Cause(ctx)}
		}
	}
	out := Outcome{Plan: plan.Playbook}
	for _, st := range plan.Steps {
		if rec, ok := byID[st.ID]; ok {
			out.Steps = append(out.Steps, rec)
			if rec.Verdict != nil {
				out.Verdict = rec.Verdict
			}
			// The run's verdict as recorded when the profile step finished
			// (runner/lifecycle's recordProfiled): the same refinement.
			if rec.Profile != nil && out.Verdict != nil {
				out.Verdict = vocab.WithProfile(out.Verdict, rec.Profile)
			}
		}
	}
	out.Status, out.Reason = Summarize(out.Steps)
	if ctx.Err() != nil && errors.Is(context.Cause(ctx), ErrCancelled) {
		out.Status, out.Reason = vocab.StatusCancelled, ErrCancelled.Error()
	}
	return out
}

// planTimeout is the plan's own timeout, or the default.
func planTimeout(plan *playbooks.Plan, in Input) time.Duration {
	if plan.Timeout > 0 {
		return plan.Timeout
	}
	return in.DefaultTimeout
}

// planExec is one Run call's state.
type planExec struct {
	plan  *playbooks.Plan
	in    Input
	hooks Hooks
	// stop interrupts the whole plan (a step could not be recorded).
	stop context.CancelCauseFunc
	mu   sync.Mutex
	// prior is what later steps read (Input.Prior); succeeded marks the ids
	// `when` sees. Both are guarded by mu.
	prior     map[string]*vocab.Result
	succeeded map[string]bool
	// missed says, of the steps that finished with no evidence (failed,
	// not configured), what happened: the triage says it when nothing was
	// measured (vocab.Input.Missed).
	missed map[string]string
}

// keep adds a finished record to what later tiers see. The caller holds mu
// (or is the only goroutine, before the first tier).
func (ex *planExec) keep(rec StepRecord) {
	if rec.evidence() {
		ex.prior[rec.ID] = rec.Result()
	} else if rec.Status == vocab.StatusFailed || rec.Status == vocab.StatusNotConfigured {
		ex.missed[rec.ID] = rec.missedText()
	}
	if rec.Status == vocab.StatusSucceeded {
		ex.succeeded[rec.ID] = true
	}
}

// views copies what a tier's steps read: every result (Prior) and the
// succeeded ones (`when`).
func (ex *planExec) views() (prior, whenPrior map[string]*vocab.Result) {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	prior = make(map[string]*vocab.Result, len(ex.prior))
	whenPrior = make(map[string]*vocab.Result, len(ex.succeeded))
	for k, v := range ex.prior {
		prior[k] = v
		if ex.succeeded[k] {
			whenPrior[k] = v
		}
	}
	return prior, whenPrior
}

func (ex *planExec) step(id string) *playbooks.PlannedStep {
	for i := range ex.plan.Steps {
		if ex.plan.Steps[i].ID == id {
			return &ex.plan.Steps[i]
		}
	}
	return &playbooks.PlannedStep{}
}

func (ex *planExec) now() time.Time {
	if ex.in.Now != nil {
		return ex.in.Now()
	}
	return time.Now()
}

// runTier runs the steps of one tier in parallel and returns their records (a
// step cut short by ErrInterrupted has none). stopped, when set, is why the
// tier must not run at all. A record StepDone could not keep interrupts the
// plan and is not returned.
func (ex *planExec) runTier(ctx context.Context, steps []*playbooks.PlannedStep, stopped string) []StepRecord {
	prior, whenPrior := ex.views()
	recs := make([]*StepRecord, len(steps))
	pre := ex.newPrelims(steps)
	pre.start(ctx)
	var wg sync.WaitGroup
	for i, st := range steps {
		if rec, ok := ex.in.Done[st.ID]; ok {
			recs[i] = &rec
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec := ex.runStep(ctx, st, prior, whenPrior, stopped)
			if rec == nil {
				return
			}
			if ex.hooks.StepDone != nil {
				if err := ex.hooks.StepDone(ctx, *rec); err != nil {
					ex.in.Log.Error("A finished step could not be recorded; stopping the run so it resumes.",
						zap.String("run", ex.in.RunID), zap.String("plan", ex.plan.Playbook),
						zap.String("step", rec.ID), zap.Error(err))
					ex.stop(fmt.Errorf("%w: step %s: %w", ErrNotRecorded, rec.ID, err))
					return
				}
			}
			recs[i] = rec
			pre.finished(ctx, *rec)
		}()
	}
	wg.Wait()
	var out []StepRecord
	ex.mu.Lock()
	defer ex.mu.Unlock()
	for _, r := range recs {
		if r == nil {
			continue
		}
		ex.keep(*r)
		out = append(out, *r)
	}
	return out
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
