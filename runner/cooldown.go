package runner

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/playbooks"
)

// cooldownScope says whose cooldown a claim is: a playbook's (checked when a
// run is planned) or a step's (checked when the step would start).
type cooldownScope string

const (
	scopePlaybook cooldownScope = "playbook"
	scopeStep     cooldownScope = "step"
)

// claimCooldown takes key for runID, or returns the run that holds it inside
// the cooldown d and when that run took it. Playbook and step cooldowns are
// the same claim in two scopes.
func (s *Service) claimCooldown(ctx context.Context, q querier, scope cooldownScope, key, runID string, d time.Duration) (holder string, at time.Time, err error) {
	holder, ms, err := s.tables.Cooldowns.Claim(ctx, q, string(scope), key, runID, d.Milliseconds())
	if err != nil || holder == "" {
		return "", time.Time{}, err
	}
	return holder, fromMS(ms), nil
}

// cooldown returns why plan p must not run now, and the run that holds the
// evidence: another run took its cooldown key inside the cooldown. Otherwise
// the key is now this run's, in q's transaction (rolled back with it if the
// plans are not stored).
func (s *Service) cooldown(ctx context.Context, q querier, runID string, p *playbooks.Plan) (why, holder string, err error) {
	if p.Cooldown <= 0 || p.CooldownKey == "" {
		return "", "", nil
	}
	other, at, err := s.claimCooldown(ctx, q, scopePlaybook, p.CooldownKey, runID, p.Cooldown)
	if err != nil {
		return "", "", fmt.Errorf("runner: cooldown of %s: %w", p.Playbook, err)
	}
	if other == "" {
		return "", "", nil
	}
	return fmt.Sprintf("cooldown: playbook %s ran for run %s at %s (cooldown %s)",
		p.Playbook, other, at.Format(time.RFC3339), p.Cooldown), other, nil
}

// A repeat inside a playbook's cooldown is said in the thread that holds the
// evidence: one short reply in the holder's thread ("fired again at 03:12:05
// UTC (run …); within vllm-queue-deep's 10m cooldown — evidence above"),
// recorded in the transaction that skips the plan, so a kill -9 leaves both
// or neither, and keyed by the repeating run and the playbook, so a retried
// or resumed skip says it once and two playbooks held by one run say it
// twice (outbox.CooldownRepeat). Before, the webhook said accepted and no surface said
// more.
// stepCooldown returns why a step with a cooldown must be skipped: another run
// took the step's cooldown key inside the cooldown. Otherwise the key is now
// this run's: a concurrent run on another replica is skipped, and persistStep
// gives the key back if the step does not succeed.
//
// A kill -9 after the claim and before the step's record leaves the key held
// by this run: its resume runs the step (the claim is its own), and if it is
// never resumed (out of attempts) the step is skipped elsewhere until the
// cooldown passes, although it never succeeded.
func (s *Service) stepCooldown(ctx context.Context, runID string, st *playbooks.PlannedStep) string {
	if st.Cooldown <= 0 || st.CooldownKey == "" {
		return ""
	}
	other, at, err := s.claimCooldown(ctx, s.db, scopeStep, st.CooldownKey, runID, st.Cooldown)
	if err != nil {
		s.log.Warn("Could not check a step's cooldown; running it.", zap.String("step", st.ID), zap.Error(err))
		return ""
	}
	if other == "" {
		return ""
	}
	return fmt.Sprintf("cooldown: step %s ran for run %s at %s (cooldown %s)", st.ID, other,
		at.Format(time.RFC3339), st.Cooldown)
}

// playbookSlot returns errWait when p's max_concurrent runs already execute:
// runs that hold a slot are owned and passed this check in their current
// generation (slot_generation). A claimed run that has not passed it yet, or
// a resumed one, holds none, so it cannot keep another out while it waits.
func (s *Service) playbookSlot(ctx context.Context, q querier, runID string, p *playbooks.Plan) error {
	if p.MaxConcurrent <= 0 {
		return nil
	}
	n, err := s.tables.Runs.PlaybookSlots(ctx, q, p.Playbook, runID)
	if err != nil {
		return fmt.Errorf("runner: max_concurrent of %s: %w", p.Playbook, err)
	}
	if n >= p.MaxConcurrent {
		return fmt.Errorf("%w: %s has %d running (max %d)", errWait, p.Playbook, n, p.MaxConcurrent)
	}
	return nil
}

// takeSlots checks a resumed run's playbooks' max_concurrent again (another
// run may have taken the slot while it was queued) and marks it as holding
// them, in one transaction under the playbooks' locks. errWait: no slot.
func (s *Service) takeSlots(ctx context.Context, r *runRow, plans []*playbooks.Plan) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return storeError{fmt.Errorf("runner: take slots: %w", err)}
	}
	defer tx.Rollback()
	for _, p := range plans {
		if err := s.lockPlaybook(ctx, tx, p); err != nil {
			return storeError{err}
		}
		if err := s.playbookSlot(ctx, tx, r.ID, p); err != nil {
			if !errors.Is(err, errWait) {
				err = storeError{err}
			}
			return err
		}
	}
	if err := s.holdSlots(ctx, tx, r.ID); err != nil {
		return storeError{err}
	}
	if err := tx.Commit(); err != nil {
		return storeError{fmt.Errorf("runner: take slots of %s: %w", r.ID, err)}
	}
	return nil
}

// holdSlots marks the run, while this process owns it, as holding its slots.
func (s *Service) holdSlots(ctx context.Context, tx *sql.Tx, runID string) error {
	held, err := s.tables.Runs.HoldSlots(ctx, tx, runID, s.id)
	if err != nil {
		return fmt.Errorf("runner: slots of %s: %w", runID, err)
	}
	if !held {
		return fmt.Errorf("runner: slots of %s: lease lost", runID)
	}
	return nil
}

// lockPlaybook serializes max_concurrent checks per playbook on PostgreSQL
// (SQLite's write transactions are serial already). Cooldowns need no lock.
func (s *Service) lockPlaybook(ctx context.Context, tx *sql.Tx, p *playbooks.Plan) error {
	if p.MaxConcurrent <= 0 {
		return nil
	}
	if err := s.tables.Runs.LockPlaybook(ctx, tx, p.Playbook); err != nil {
		return fmt.Errorf("runner: lock playbook %s: %w", p.Playbook, err)
	}
	return nil
}
