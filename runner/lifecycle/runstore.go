package lifecycle

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/runner/grouping"
	"github.com/autocapture/autocapture/runner/outbox"
	"github.com/autocapture/autocapture/vocab"
)

// finish records the run's end (only while this process owns it) and, when
// the run has a thread, the parent's update in the same transaction: a kill -9
// leaves a finished run whose thread will say so, or an unfinished one.
// Writes use a context that outlives a cancelled run. A run that ends
// without a verdict keeps the latest it recorded (a preliminary one, when
// triage never ran after it).
func (s *Runs) finish(ctx context.Context, r *runRow, status vocab.Status, reason string, v *vocab.Verdict) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var verdict sql.NullString
	if v != nil {
		b, _ := json.Marshal(v)
		verdict = sql.NullString{String: string(b), Valid: true}
	}
	tx, err := s.db.BeginTx(wctx, nil)
	if err != nil {
		return fmt.Errorf("runner: finish run %s: %w", r.ID, err)
	}
	defer tx.Rollback()
	tookMS, err := s.tables.Runs.Finish(wctx, tx, r.ID, s.id, status, reason, verdict) // from the first start, on the database's clock
	if errors.Is(err, sql.ErrNoRows) {
		s.log.Warn("Run finished here but its lease was taken over; result not recorded.", zap.String("run", r.ID))
		return nil
	}
	if err != nil {
		return fmt.Errorf("runner: finish run %s: %w", r.ID, err)
	}
	if err := s.out.Append(wctx, tx, r.ID, outbox.Finished{}); err != nil {
		return fmt.Errorf("runner: finish run %s: %w", r.ID, err)
	}
	if err := s.againEnded(wctx, tx, r); err != nil { // a profile taken again replies in the clicked run's thread
		return err
	}
	if err := s.art.EnqueueManifestTx(wctx, tx, r.ID); err != nil { // committed with the finish: see runner/artifacts' manifest.go
		return fmt.Errorf("runner: finish run %s: %w", r.ID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("runner: finish run %s: %w", r.ID, err)
	}
	took := time.Duration(tookMS) * time.Millisecond
	s.m.Finished.WithLabelValues(string(status)).Inc()
	s.m.Duration.WithLabelValues(string(status)).Observe(took.Seconds())
	s.log.Info("Run finished.", zap.String("run", r.ID), zap.String("status", string(status)), zap.String("reason", reason))
	return nil
}

// unclaim hands a run back to the queue without counting the attempt (it waits
// for a playbook slot) and returns ret for River.
func (s *Runs) unclaim(h *handle, ret error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.tables.Runs.Unclaim(ctx, s.db, h.id, s.id, vocab.StatusQueued); err != nil {
		return fmt.Errorf("runner: unclaim run %s: %w", h.id, err)
	}
	return ret
}

// storePlans checks each plan's cooldown and max_concurrent and persists the
// plans that may run (identity and window, so a resume rebuilds exactly these;
// one row per playbook for max_concurrent), all in one transaction: the
// cooldown claims are atomic on their own (grouping's Admit); for
// max_concurrent SQLite's BEGIN IMMEDIATE and a PostgreSQL advisory lock per
// playbook make the count-then-hold atomic across workers and replicas. It
// returns the kept plans and why the others were skipped; grouping.ErrWait
// when a playbook has no slot.
func (s *Runs) storePlans(ctx context.Context, r *runRow, all []*playbooks.Plan, w vocab.Window) ([]*playbooks.Plan, []string, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, nil, storeError{fmt.Errorf("runner: store plans: %w", err)}
	}
	defer tx.Rollback()
	fired := r.alert.StartsAt // when the alert fired, for a repeat's reply
	if fired.IsZero() {
		fired = r.CreatedAt
	}
	var plans []*playbooks.Plan
	var skipped, repeated []string
	for _, p := range all {
		why, err := s.grp.Admit(ctx, tx, r.ID, fired, p)
		if err != nil {
			if !errors.Is(err, grouping.ErrWait) {
				err = storeError{err}
			}
			return nil, nil, err
		}
		if why != "" { // inside its cooldown: said in the holder's thread
			skipped = append(skipped, why)
			repeated = append(repeated, p.Playbook)
			continue
		}
		plans = append(plans, p)
	}
	if len(plans) > 0 {
		if err := s.insertPlans(ctx, tx, r, plans, w); err != nil {
			return nil, nil, storeError{err}
		}
	}
	if len(plans) > 0 || len(repeated) > 0 { // else nothing to keep: the claims of a run that holds none
		if err := tx.Commit(); err != nil {
			return nil, nil, storeError{fmt.Errorf("runner: store plans of %s: %w", r.ID, err)}
		}
	}
	s.grp.CountRepeats(repeated)
	return plans, skipped, nil
}

func (s *Runs) insertPlans(ctx context.Context, tx *sql.Tx, r *runRow, plans []*playbooks.Plan, w vocab.Window) error {
	stored := make(storedPlans, len(plans))
	for i, p := range plans {
		stored[i] = p.Stored()
	}
	b, err := json.Marshal(stored)
	if err != nil {
		return fmt.Errorf("runner: encode plans: %w", err)
	}
	owned, err := s.tables.Runs.StorePlans(ctx, tx, r.ID, s.id, string(b), toMS(w.Start), toMS(w.End))
	if err != nil {
		return fmt.Errorf("runner: store plans of %s: %w", r.ID, err)
	}
	if !owned {
		return fmt.Errorf("runner: store plans of %s: lease lost", r.ID)
	}
	for _, p := range plans {
		if err := s.tables.Runs.AddPlaybook(ctx, tx, r.ID, p.Playbook, p.CooldownKey, toMS(r.CreatedAt)); err != nil {
			return fmt.Errorf("runner: store plans of %s: %w", r.ID, err)
		}
	}
	// The parent goes out before any step: its operation commits with the
	// plans (a kill -9 leaves both or neither).
	if err := s.out.Append(ctx, tx, r.ID, outbox.Open{Channel: s.grp.Channel(r.received, plans)}); err != nil {
		return err
	}
	r.plans, r.window = stored, &w
	return nil
}

// doneSteps loads the steps persisted by earlier attempts, by plan and step id.
func (s *Runs) doneSteps(ctx context.Context, runID string) (map[string]map[string]executor.StepRecord, error) {
	recs, err := s.loadSteps(ctx, s.db, runID)
	if err != nil {
		return nil, storeError{err}
	}
	out := map[string]map[string]executor.StepRecord{}
	for _, r := range recs {
		if out[r.Plan] == nil {
			out[r.Plan] = map[string]executor.StepRecord{}
		}
		out[r.Plan][r.ID] = r
	}
	return out, nil
}
