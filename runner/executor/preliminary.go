package executor

import (
	"context"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/vocab"
)

// Preliminary is a verdict the plan's triage step reached over part of tier
// 1: a step with signals (the PromQL snapshot, ~0.1 s) finished while others
// (the scrape's two samples, seconds) still ran. The triage step's own
// record, once tier 1 is over, is the refined verdict.
type Preliminary struct {
	Plan string
	// StepID is the triage step that reached it.
	StepID string
	// Key names it among the step's preliminaries by the evidence it read
	// (the sorted ids of the tier-1 steps with signals, "+"-joined): the same
	// evidence gives the same key, so a resumed run that reaches it again
	// records nothing new.
	Key string
	// Sources are the tier-1 steps whose evidence it read (Key's ids);
	// Waiting the tier-1 steps still running when it was reached.
	Sources, Waiting []string
	// Result is the triage step's result over that evidence (its verdict is
	// marked Preliminary; findings carry sources and origins).
	Result *vocab.Result
	At     time.Time
}

// prelims reaches preliminary verdicts while one tier runs: after each step
// with signals that finishes while others of the tier still run (and at the
// tier's start, for signals an earlier attempt recorded). Calls are
// serialised, so preliminaries are reported in the order of the evidence.
type prelims struct {
	ex     *planExec
	triage []*playbooks.PlannedStep
	mu     sync.Mutex
	have   map[string]StepRecord // finished steps of the tier, by id
	left   map[string]bool       // steps of the tier still running
	last   string                // key of the last preliminary reached
}

// newPrelims returns the tier's preliminaries, or nil when there are none to
// reach: not tier 1, no hook, or no triage step left to run.
func (ex *planExec) newPrelims(steps []*playbooks.PlannedStep) *prelims {
	if ex.hooks.Preliminary == nil || len(steps) < 2 || steps[0].Tier != vocab.TierMetrics {
		return nil
	}
	p := &prelims{ex: ex, have: map[string]StepRecord{}, left: map[string]bool{}}
	for i := range ex.plan.Steps {
		st := &ex.plan.Steps[i]
		if _, done := ex.in.Done[st.ID]; !done && st.Tier == vocab.TierTriage && st.Step != nil && st.RenderErr == nil {
			p.triage = append(p.triage, st)
		}
	}
	if len(p.triage) == 0 {
		return nil
	}
	for _, st := range steps {
		if rec, ok := ex.in.Done[st.ID]; ok {
			p.have[st.ID] = rec
		} else {
			p.left[st.ID] = true
		}
	}
	return p
}

// start reaches a preliminary over what an earlier attempt recorded of the
// tier, when some of it still runs (a resume between the snapshot and the
// scrape: the key it reaches is the one recorded before, if it was).
func (p *prelims) start(ctx context.Context) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.left) > 0 {
		p.reach(ctx)
	}
}

// finished notes a recorded step and, when it brought signals and the tier
// still runs, reaches a preliminary.
func (p *prelims) finished(ctx context.Context, rec StepRecord) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.have[rec.ID] = rec
	delete(p.left, rec.ID)
	if len(p.left) > 0 && rec.evidence() && len(rec.Signals) > 0 && ctx.Err() == nil {
		p.reach(ctx)
	}
}

// reach runs the plan's triage steps over the evidence so far and reports
// each verdict. The caller holds mu. A triage step that fails, or whose
// `when` is false over this evidence, reports nothing; a hook's error is
// logged and the run goes on (the refined verdict follows).
func (p *prelims) reach(ctx context.Context) {
	ex := p.ex
	prior, whenPrior := ex.views()
	var sources []string
	for id, rec := range p.have {
		if rec.evidence() {
			prior[id] = rec.Result()
			if len(rec.Signals) > 0 {
				sources = append(sources, id)
			}
		}
		if rec.Status == vocab.StatusSucceeded {
			whenPrior[id] = rec.Result()
		}
	}
	if len(sources) == 0 {
		return
	}
	sort.Strings(sources)
	key := strings.Join(sources, "+")
	if key == p.last {
		return
	}
	p.last = key
	waiting := make([]string, 0, len(p.left))
	for id := range p.left {
		waiting = append(waiting, id)
	}
	sort.Strings(waiting)
	for _, st := range p.triage {
		if st.When != nil {
			if ok, err := evalWhen(st.When, ex.in, whenPrior); err != nil || !ok {
				continue
			}
		}
		stepCtx, cancel := ex.stepContext(ctx, st)
		res, err := ex.invoke(stepCtx, st, prior)
		cancel(nil)
		log := ex.in.Log.With(zap.String("run", ex.in.RunID), zap.String("plan", ex.plan.Playbook), zap.String("step", st.ID))
		if err != nil || res == nil || res.Verdict == nil {
			log.Warn("No preliminary verdict over the evidence so far.", zap.String("evidence", key), zap.Error(err))
			continue
		}
		v := *res.Verdict
		v.Preliminary = true
		res.Verdict = &v
		pv := Preliminary{Plan: ex.plan.Playbook, StepID: st.ID, Key: key, Sources: sources, Waiting: waiting,
			Result: res, At: ex.now()}
		if err := ex.hooks.Preliminary(ctx, pv); err != nil {
			log.Warn("A preliminary verdict could not be recorded; the refined one follows.", zap.String("verdict", v.ID), zap.Error(err))
		}
	}
}
