package grouping

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/outbox"
)

// ErrWait: a playbook's max_concurrent is reached; the run waits (its job
// snoozes) without counting an attempt.
var ErrWait = errors.New("playbook at its max_concurrent")

// cooldownScope says whose cooldown a claim is: a playbook's (checked when a
// run is planned) or a step's (checked when the step would start).
type cooldownScope string

const (
	scopePlaybook cooldownScope = "playbook"
	scopeStep     cooldownScope = "step"
)

// claimCooldown takes key for runID, or returns the run that holds it inside
// the cooldown d and when that run took it. Playbook and step cooldowns are
// the same claim in two scopes; the claim is one statement, so two runs on
// two replicas cannot both take a key (database.Cooldowns.Claim).
func (g *Grouper) claimCooldown(ctx context.Context, q database.RowQuerier, scope cooldownScope, key, runID string, d time.Duration) (holder string, at time.Time, err error) {
	holder, ms, err := g.tables.Cooldowns.Claim(ctx, q, string(scope), key, runID, d.Milliseconds())
	if err != nil || holder == "" {
		return "", time.Time{}, err
	}
	return holder, fromMS(ms), nil
}

// Admit decides, in the transaction tx that stores run runID's plans, whether
// plan p may run: it takes p's playbook lock (lockPlaybook), then p's
// cooldown key for the run, then checks p's max_concurrent (CheckSlot). why
// is set when another run holds the cooldown: the plan is skipped, and the
// repeat is recorded in tx in the holder's thread (fired: when the run's
// alert fired). ErrWait: p has no slot. Any other error is the store's.
// Whatever it took is rolled back with tx if the plans are not stored.
//
// A repeat inside a playbook's cooldown is said in the thread that holds the
// evidence: one short reply in the holder's thread ("fired again at 03:12:05
// UTC (run …); within vllm-queue-deep's 10m cooldown — evidence above"),
// recorded in the transaction that skips the plan, so a kill -9 leaves both
// or neither, and keyed by the repeating run and the playbook, so a retried
// or resumed skip says it once and two playbooks held by one run say it
// twice (outbox.CooldownRepeat). Once tx commits, the caller counts it
// (CountRepeats).
func (g *Grouper) Admit(ctx context.Context, tx *sql.Tx, runID string, fired time.Time, p *playbooks.Plan) (why string, err error) {
	if err := g.lockPlaybook(ctx, tx, p); err != nil {
		return "", err
	}
	why, holder, err := g.cooldown(ctx, tx, runID, p)
	if err != nil {
		return "", err
	}
	if why != "" {
		if err := g.out.Append(ctx, tx, holder, outbox.CooldownRepeat{Repeat: runID, Playbook: p.Playbook, Cooldown: p.Cooldown,
			Fired: fired}); err != nil {
			return "", fmt.Errorf("runner: say %s's repeat in %s's thread: %w", runID, holder, err)
		}
		return why, nil
	}
	return "", g.CheckSlot(ctx, tx, runID, p)
}

// CountRepeats counts the skips inside a playbook's cooldown that Admit
// recorded, once their transaction committed
// (autocapture_cooldown_repeats_total).
func (g *Grouper) CountRepeats(playbooks []string) {
	for _, pb := range playbooks {
		g.m.cooldownRepeats.WithLabelValues(pb).Inc()
	}
}

// cooldown returns why plan p must not run now, and the run that holds the
// evidence: another run took its cooldown key inside the cooldown. Otherwise
// the key is now this run's, in q's transaction (rolled back with it if the
// plans are not stored).
func (g *Grouper) cooldown(ctx context.Context, q database.RowQuerier, runID string, p *playbooks.Plan) (why, holder string, err error) {
	if p.Cooldown <= 0 || p.CooldownKey == "" {
		return "", "", nil
	}
	other, at, err := g.claimCooldown(ctx, q, scopePlaybook, p.CooldownKey, runID, p.Cooldown)
	if err != nil {
		return "", "", fmt.Errorf("runner: cooldown of %s: %w", p.Playbook, err)
	}
	if other == "" {
		return "", "", nil
	}
	return fmt.Sprintf("cooldown: playbook %s ran for run %s at %s (cooldown %s)",
		p.Playbook, other, at.Format(time.RFC3339), p.Cooldown), other, nil
}

// StepCooldown returns why a step with a cooldown must be skipped: another run
// took the step's cooldown key inside the cooldown. Otherwise the key is now
// this run's: a concurrent run on another replica is skipped, and the step's
// record gives the key back if the step does not succeed (ReleaseStep).
//
// A kill -9 after the claim and before the step's record leaves the key held
// by this run: its resume runs the step (the claim is its own), and if it is
// never resumed (out of attempts) the step is skipped elsewhere until the
// cooldown passes, although it never succeeded.
func (g *Grouper) StepCooldown(ctx context.Context, runID string, st *playbooks.PlannedStep) string {
	if st.Cooldown <= 0 || st.CooldownKey == "" {
		return ""
	}
	other, at, err := g.claimCooldown(ctx, g.db, scopeStep, st.CooldownKey, runID, st.Cooldown)
	if err != nil {
		g.log.Warn("Could not check a step's cooldown; running it.", zap.String("step", st.ID), zap.Error(err))
		return ""
	}
	if other == "" {
		return ""
	}
	return fmt.Sprintf("cooldown: step %s ran for run %s at %s (cooldown %s)", st.ID, other,
		at.Format(time.RFC3339), st.Cooldown)
}

// ReleaseStep gives a step's cooldown key back if run runID holds it, in the
// transaction q that records the step (a step that did not succeed): a
// crash leaves both or neither.
func (g *Grouper) ReleaseStep(ctx context.Context, q database.Querier, key, runID string) error {
	return g.tables.Cooldowns.Release(ctx, q, string(scopeStep), key, runID)
}

// CheckSlot returns ErrWait when p's max_concurrent runs already execute:
// runs that hold a slot are owned and passed this check in their current
// generation (slot_generation). A claimed run that has not passed it yet, or
// a resumed one, holds none, so it cannot keep another out while it waits.
func (g *Grouper) CheckSlot(ctx context.Context, q database.RowQuerier, runID string, p *playbooks.Plan) error {
	if p.MaxConcurrent <= 0 {
		return nil
	}
	n, err := g.tables.Runs.PlaybookSlots(ctx, q, p.Playbook, runID)
	if err != nil {
		return fmt.Errorf("runner: max_concurrent of %s: %w", p.Playbook, err)
	}
	if n >= p.MaxConcurrent {
		return fmt.Errorf("%w: %s has %d running (max %d)", ErrWait, p.Playbook, n, p.MaxConcurrent)
	}
	return nil
}

// TakeSlots checks a resumed run's playbooks' max_concurrent again (another
// run may have taken the slot while it was queued) and marks it as holding
// them, in the caller's transaction tx under the playbooks' locks. ErrWait:
// no slot; any other error is the store's.
func (g *Grouper) TakeSlots(ctx context.Context, tx *sql.Tx, runID string, plans []*playbooks.Plan) error {
	for _, p := range plans {
		if err := g.lockPlaybook(ctx, tx, p); err != nil {
			return err
		}
		if err := g.CheckSlot(ctx, tx, runID, p); err != nil {
			return err
		}
	}
	return g.holdSlots(ctx, tx, runID)
}

// holdSlots marks the run, while this process owns it, as holding its slots.
func (g *Grouper) holdSlots(ctx context.Context, tx *sql.Tx, runID string) error {
	held, err := g.tables.Runs.HoldSlots(ctx, tx, runID, g.owner)
	if err != nil {
		return fmt.Errorf("runner: slots of %s: %w", runID, err)
	}
	if !held {
		return fmt.Errorf("runner: slots of %s: lease lost", runID)
	}
	return nil
}

// lockPlaybook serializes max_concurrent checks per playbook on PostgreSQL
// for the rest of tx (SQLite's write transactions are serial already).
// Cooldowns need no lock.
func (g *Grouper) lockPlaybook(ctx context.Context, tx *sql.Tx, p *playbooks.Plan) error {
	if p.MaxConcurrent <= 0 {
		return nil
	}
	if err := g.tables.Runs.LockPlaybook(ctx, tx, p.Playbook); err != nil {
		return fmt.Errorf("runner: lock playbook %s: %w", p.Playbook, err)
	}
	return nil
}
