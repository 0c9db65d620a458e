package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/runner/outbox"
	"github.com/autocapture/autocapture/vocab"
)

// hooks connect executor.Run to the store and the thread for one run.
func (s *Runs) hooks(r *runRow, plans []*playbooks.Plan) executor.Hooks {
	keys := map[string]string{} // plan/step → step cooldown key
	for _, p := range plans {
		for _, st := range p.Steps {
			keys[p.Playbook+"/"+st.ID] = st.CooldownKey
		}
	}
	return executor.Hooks{
		Skip: func(ctx context.Context, p *playbooks.Plan, st *playbooks.PlannedStep) string {
			return s.grp.StepCooldown(ctx, r.ID, st)
		},
		StepDone: func(ctx context.Context, rec executor.StepRecord) error {
			if err := s.persistStep(ctx, r.ID, rec, keys[rec.Plan+"/"+rec.ID]); err != nil {
				return err // the executor stops the run: the step runs again on resume
			}
			s.m.Steps.WithLabelValues(rec.Kind, string(rec.Status)).Inc()
			if rec.Status != vocab.StatusSkipped && rec.Status != vocab.StatusNotConfigured { // ran: its time counts
				s.m.StepTime.WithLabelValues(rec.Kind).Observe(time.Duration(rec.DurationMS * int64(time.Millisecond)).Seconds())
			}
			s.prof.CountStep(rec)
			return nil
		},
		Abandoned: func(kind string, delta int) { s.m.Abandoned.WithLabelValues(kind).Add(float64(delta)) },
		Preliminary: func(ctx context.Context, p executor.Preliminary) error {
			return s.persistPreliminary(ctx, r.ID, p)
		},
	}
}

// persistStep stores a finished step while this process still owns the run (the
// owner check and the insert are one transaction, so a process that lost its
// lease cannot write), with its reply in the thread's outbox (and, for a
// verdict, its place in the verdict history, the parent's update and, when
// it differs from the preliminary one, the reply saying so): a kill -9 leaves
// the step and its reply, or neither — never a stored step whose reply is
// never sent.
func (s *Runs) persistStep(ctx context.Context, runID string, rec executor.StepRecord, cooldownKey string) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode step %s: %w", rec.ID, err)
	}
	tx, err := s.db.BeginTx(wctx, nil)
	if err != nil {
		return fmt.Errorf("persist step %s: %w", rec.ID, err)
	}
	defer tx.Rollback()
	owned, err := s.tables.Runs.LockOwned(wctx, tx, runID, s.id)
	if err != nil {
		return fmt.Errorf("persist step %s: %w", rec.ID, err)
	}
	if !owned {
		return fmt.Errorf("persist step %s: lease lost", rec.ID)
	}
	if err := s.tables.Steps.Add(wctx, tx, database.Step{RunID: runID, Plan: rec.Plan, ID: rec.ID, Kind: rec.Kind,
		Status: rec.Status, CooldownKey: cooldownKey, FinishedAt: toMS(rec.FinishedAt), Record: string(b)}); err != nil {
		return fmt.Errorf("persist step %s: %w", rec.ID, err)
	}
	// A step that did not succeed gives its cooldown key back (the grouper's
	// StepCooldown took it), in the same transaction as its record: a crash
	// leaves both or neither.
	if cooldownKey != "" && rec.Status != vocab.StatusSucceeded {
		if err := s.grp.ReleaseStep(wctx, tx, cooldownKey, runID); err != nil {
			return fmt.Errorf("persist step %s: cooldown: %w", rec.ID, err)
		}
	}
	ops := []outbox.Op{outbox.StepReply{Plan: rec.Plan, Step: rec.ID}}
	var ref refined
	if rec.Verdict != nil {
		var changed []outbox.Op
		changed, ref, err = s.recordRefined(wctx, tx, runID, rec)
		if err != nil {
			return fmt.Errorf("persist step %s: %w", rec.ID, err)
		}
		ops = append(append(ops, changed...), outbox.VerdictEdit{})
	}
	profiled := ""
	if rec.Profile != nil {
		var edit []outbox.Op
		edit, profiled, err = s.recordProfiled(wctx, tx, runID, rec)
		if err != nil {
			return fmt.Errorf("persist step %s: %w", rec.ID, err)
		}
		ops = append(ops, edit...)
	}
	if err := s.out.Append(wctx, tx, runID, ops...); err != nil {
		return fmt.Errorf("persist step %s: %w", rec.ID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("persist step %s: %w", rec.ID, err)
	}
	if rec.Verdict != nil {
		ref.count(s.m, rec.Verdict.ID)
	}
	s.countProfiled(profiled)
	return nil
}
