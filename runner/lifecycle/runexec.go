package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/riverqueue/river"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/actions"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/runner/grouping"
	"github.com/autocapture/autocapture/runner/outbox"
	"github.com/autocapture/autocapture/vocab"
)

// waitSnooze is how long a run waits for a playbook's max_concurrent.
const waitSnooze = 2 * time.Second

// execute runs a claimed run to its end, or releases it when interrupted.
// It returns an error only for River: a snooze, or a store failure.
func (s *Runs) execute(ctx context.Context, h *handle) error {
	r, err := s.getRow(ctx, s.db, h.id)
	var corrupt corruptError
	if errors.As(err, &corrupt) {
		return s.failCorrupt(ctx, h, corrupt)
	}
	if err != nil {
		s.release(h, err)
		return err
	}
	log := s.log.With(zap.String("run", r.ID), zap.String("alertname", r.Alertname))
	if r.ResolvedAt != nil {
		h.resolve()
	}
	switch {
	case r.CancelRequestedAt != nil:
		return s.finish(ctx, r, vocab.StatusCancelled, executor.ErrCancelled.Error(), nil)
	case r.Attempts > s.cfg.MaxAttempts:
		why := fmt.Sprintf("gave up after %d attempts (runs.max_attempts %d): the run was interrupted each time before it finished",
			r.Attempts-1, s.cfg.MaxAttempts)
		return s.finish(ctx, r, vocab.StatusFailed, why, nil)
	}
	plans, window, skip, err := s.plansFor(ctx, r)
	switch {
	case errors.Is(err, grouping.ErrWait):
		log.Info("Run waits: a playbook is at its max_concurrent.", zap.Error(err))
		return s.unclaim(h, river.JobSnooze(waitSnooze))
	case err != nil && isStoreErr(err):
		s.release(h, err)
		return err
	case err != nil:
		return s.finish(ctx, r, vocab.StatusFailed, err.Error(), nil)
	case skip != "":
		return s.finish(ctx, r, vocab.StatusSkipped, skip, nil)
	}
	if err := s.recordResumed(ctx, r); err != nil {
		s.release(h, err)
		return err
	}
	done, err := s.doneSteps(ctx, r.ID)
	if err != nil {
		s.release(h, err)
		return err
	}
	log.Info("Run started.", zap.Int("attempt", r.Attempts), zap.Int("resumed", r.Resumed), zap.Int("plans", len(plans)))
	var outs []executor.Outcome
	env := s.art.RunEnv(r.ID, done) // one byte cap over every plan of the attempt
	for _, p := range plans {
		in := executor.Input{RunID: r.ID, Attempt: r.Attempts, Created: r.CreatedAt, Alert: r.received, Window: window, Env: env, Log: s.log,
			Done: done[p.Playbook], Resolved: h.resolved, DefaultTimeout: s.cfg.DefaultTimeout,
			Started: h.started, AbandonGrace: s.cfg.AbandonGrace, Now: s.clock}
		out := executor.Run(ctx, p, in, s.hooks(r, plans))
		if out.Interrupted {
			s.release(h, out.Cause)
			return nil
		}
		outs = append(outs, out)
	}
	status, reason, verdict := runStatus(outs)
	return s.finish(ctx, r, status, reason, verdict)
}

// runStatus folds the plans' outcomes into the run's: cancelled if any plan
// was, else the steps of every plan summed up as one plan's are
// (executor.Summarize), each plan's reason named.
func runStatus(outs []executor.Outcome) (status vocab.Status, reason string, verdict *vocab.Verdict) {
	var steps []executor.StepRecord
	var why []string
	cancelled := false
	for _, o := range outs {
		steps = append(steps, o.Steps...)
		cancelled = cancelled || o.Status == vocab.StatusCancelled
		if o.Reason != "" {
			why = append(why, o.Plan+": "+o.Reason)
		}
		if o.Verdict != nil {
			verdict = o.Verdict
		}
	}
	reason = strings.Join(why, "; ")
	if cancelled {
		return vocab.StatusCancelled, reason, verdict
	}
	status, _ = executor.Summarize(steps)
	if status == vocab.StatusSucceeded {
		reason = ""
	}
	return status, reason, verdict
}

// storeError marks a failure of the run store (as opposed to a planning error).
type storeError struct{ err error }

func (e storeError) Error() string { return e.err.Error() }
func (e storeError) Unwrap() error { return e.err }

func isStoreErr(err error) bool { var se storeError; return errors.As(err, &se) }

// takeSlots checks a resumed run's playbooks' max_concurrent again (another
// run may have taken the slot while it was queued) and marks it as holding
// them, in one transaction under the playbooks' locks (grouping's
// TakeSlots). grouping.ErrWait: no slot.
func (s *Runs) takeSlots(ctx context.Context, r *runRow, plans []*playbooks.Plan) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return storeError{fmt.Errorf("runner: take slots: %w", err)}
	}
	defer tx.Rollback()
	if err := s.grp.TakeSlots(ctx, tx, r.ID, plans); err != nil {
		if !errors.Is(err, grouping.ErrWait) {
			err = storeError{err}
		}
		return err
	}
	if err := tx.Commit(); err != nil {
		return storeError{fmt.Errorf("runner: take slots of %s: %w", r.ID, err)}
	}
	return nil
}

// plansFor returns the run's plans: built by the Planner at first execution
// (cooldown and max_concurrent checked, identity and window persisted), rebuilt
// from what was stored on resume. skip is set when no plan is left to run.
func (s *Runs) plansFor(ctx context.Context, r *runRow) (plans []*playbooks.Plan, w vocab.Window, skip string, err error) {
	if actionID, ok := actions.AgainAction(r.Key); ok { // a profile taken again (again.go)
		return s.againPlans(ctx, r, actionID)
	}
	if r.plans != nil && r.window != nil {
		for _, sp := range r.plans {
			p, err := s.planner.Rebuild(sp, r.received, *r.window)
			if err != nil {
				return nil, w, "", fmt.Errorf("rebuild playbook %s (%s, %.12s): %w", sp.Playbook, sp.File, sp.Digest, err)
			}
			plans = append(plans, p)
		}
		if err := s.takeSlots(ctx, r, plans); err != nil {
			return nil, w, "", err
		}
		return plans, *r.window, "", nil
	}
	// The window ends when the alert arrived, not when a worker got to the
	// run (a storm's runs wait behind max_concurrent): the snapshot
	// describes the moment of the page.
	w = vocab.AlertWindow(r.StartsAt, s.cfg.Lookback, r.CreatedAt.UTC())
	all, err := s.planner.Plan(r.received, w)
	if err != nil {
		return nil, w, "", fmt.Errorf("planning: %w", err)
	}
	if len(all) == 0 {
		return nil, w, "no playbook matched", nil
	}
	plans, skipped, err := s.storePlans(ctx, r, all, w)
	if err != nil {
		return nil, w, "", err
	}
	if len(plans) == 0 {
		return nil, w, strings.Join(skipped, "; "), nil
	}
	return plans, w, "", nil
}

// recordResumed names this process, which holds the run now, in the reply
// the reaper recorded for the resume in its own commit (naming the owner it
// took the run from), before the run can finish: read at delivery instead,
// the run's owner is gone once it finished, and a deliverer that came after
// that could only say "a live replica goes on". A run resumed by a reaper
// that recorded no reply (an older version) gets it here; otherwise that
// record is a no-op repeat (the key), whose job wakes the deliverer.
//
// A resume before the run's thread existed (its attempt interrupted before
// the plans, and the thread's parent with them, were stored) recorded no
// reply: the thread says each of them here, before this one, as the
// parent's count does ("resumed after an interruption — 1st resume"); the
// ones recorded already are no-op repeats.
func (s *Runs) recordResumed(ctx context.Context, r *runRow) error {
	if r.Resumed == 0 {
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return storeError{fmt.Errorf("runner: record resume of %s: %w", r.ID, err)}
	}
	defer tx.Rollback()
	// The reaper's reply (outbox.Resumed, From set) names no claimer yet:
	// this process is it.
	if err := s.out.Claimed(ctx, tx, r.ID, r.Resumed, s.id); err != nil {
		return storeError{fmt.Errorf("runner: record resume of %s: %w", r.ID, err)}
	}
	ops := make([]outbox.Op, 0, r.Resumed)
	for n := 1; n < r.Resumed; n++ {
		ops = append(ops, outbox.Resumed{N: n})
	}
	ops = append(ops, outbox.Resumed{N: r.Resumed, On: s.id})
	if err := s.out.Append(ctx, tx, r.ID, ops...); err != nil {
		return storeError{err}
	}
	return tx.Commit()
}

// failCorrupt ends a run whose row cannot be decoded: failed, with the reason.
func (s *Runs) failCorrupt(ctx context.Context, h *handle, err error) error {
	s.log.Error("A run cannot be read; failing it.", zap.String("run", h.id), zap.Error(err))
	uerr := s.tables.Runs.FailOwned(context.WithoutCancel(ctx), s.db, h.id, s.id, vocab.StatusFailed, "cannot read the run: "+err.Error())
	if uerr != nil {
		return storeError{fmt.Errorf("runner: fail unreadable run %s: %w", h.id, uerr)}
	}
	return nil
}
