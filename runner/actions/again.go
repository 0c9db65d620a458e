package actions

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// "Profile again": a click takes the run's playbook's profile step again,
// now, against the same instance, as a run of its own (the lifecycle's
// again.go) that asks the same guard as every capture (one lease per target,
// the budget, the cooldown, the pause), posts no thread of its own and, when
// it ends, replies once in the clicked run's thread (againreply.go). The
// guard is asked first (Peek), so a refusal is answered at once; the run's
// own Acquire still decides. One run again at a time per run: the action
// holds the slot profile/<run> until its run ends.
//
// What a kill -9 leaves between each pair of writes:
//   - row written (pending, holding the slot), before the run was created:
//     no run; the claim lapses and the next click or the sweep resumes it
//     (the guard asked again, then the run created).
//   - the run created with its job, and the row done: one transaction, both
//     or neither; the run's key is again/<action>, so a resumed row finds it
//     and creates none.
//   - a refusal: the row failed with the guard's words, its slot freed, and
//     the thread's reply: one transaction.
//   - the run ended, its reply recorded in the clicked run's thread and the
//     slot freed: one transaction (the lifecycle's finish); a run killed
//     before it is resumed by the reaper like any other.

// Againer is the run lifecycle's side of "Profile again" (*lifecycle.Runs).
type Againer interface {
	// ProfileStep is what runID's profile step asks the guard for (target,
	// cooldown); ok is false when the run's playbooks have none. An unknown
	// run wraps runs.ErrNotFound.
	ProfileStep(ctx context.Context, runID string) (req vocab.LeaseRequest, ok bool, err error)
	// Again creates in tx, queued, the run that takes runID's profile again
	// for action actionID; a second call for the action finds that run.
	Again(ctx context.Context, tx *sql.Tx, runID, actionID string) (string, error)
}

// Guard says whether the profiling guard would refuse a capture now, and
// why, taking nothing (*profiling.Plane).
type Guard interface {
	Peek(ctx context.Context, req vocab.LeaseRequest) (*vocab.ProfileRefusal, error)
}

// againKeyPrefix leads the run key of a run that takes a profile again.
const againKeyPrefix = "again/"

// AgainKey is the run key of action actionID's run.
func AgainKey(actionID string) string { return againKeyPrefix + actionID }

// AgainAction reads AgainKey back: the action whose run key is key.
func AgainAction(key string) (string, bool) {
	id, ok := strings.CutPrefix(key, againKeyPrefix)
	return id, ok && id != ""
}

// profileSlot is the slot a run's "Profile again" holds while its run is
// in flight.
func profileSlot(runID string) string { return KindProfile + "/" + runID }

// ProfileAgain takes c.RunID's profile again. A second click while one is
// in flight is told who asked when; a retry of the same click does nothing
// more.
func (a *Actions) ProfileAgain(ctx context.Context, c Click) (Result, error) {
	return a.profileAgain(ctx, c, 2)
}

func (a *Actions) profileAgain(ctx context.Context, c Click, tries int) (Result, error) {
	if a.d.Again == nil {
		return Result{}, fmt.Errorf("%w: profile again is off", ErrUnknown)
	}
	req, ok, err := a.d.Again.ProfileStep(ctx, c.RunID)
	if errors.Is(err, runs.ErrNotFound) {
		return Result{}, fmt.Errorf("%w: run %s", ErrUnknown, c.RunID)
	}
	if err != nil {
		return Result{}, fmt.Errorf("actions: profile run %s again: %w", c.RunID, err)
	}
	if !ok {
		return Result{"failed", "This run's playbooks have no profile step: there is nothing to take again."}, nil
	}
	row := database.ActionRow{ID: KindProfile + "/" + c.RunID + "/" + c.Interaction, RunID: c.RunID, Kind: KindProfile,
		Arg: req.Target, UserID: c.UserID, UserName: c.UserName, Slot: sql.NullString{String: profileSlot(c.RunID), Valid: true}}
	// Write 1: the pending row, holding the slot, before the guard is asked.
	wrote, err := a.d.Tables.Actions.Begin(ctx, a.db(), row, a.claimMS())
	if err != nil {
		return Result{}, fmt.Errorf("actions: record profile again of run %s: %w", c.RunID, err)
	}
	if wrote {
		return a.again(ctx, row, req)
	}
	res, free, err := a.againTaken(ctx, row, req)
	if free && tries > 0 { // the slot was freed meanwhile: this click may take it
		return a.profileAgain(ctx, c, tries-1)
	}
	return res, err
}

// againTaken answers a click whose row, or whose run's slot, is taken: a
// pending action whose maker died is resumed; one in flight is reported.
// free: the slot holds no action in flight any more; click again.
func (a *Actions) againTaken(ctx context.Context, row database.ActionRow, req vocab.LeaseRequest) (Result, bool, error) {
	held, err := a.d.Tables.Actions.Get(ctx, a.db(), row.ID)
	if errors.Is(err, sql.ErrNoRows) {
		var ok bool
		if held, ok, err = a.d.Tables.Actions.BySlot(ctx, a.db(), profileSlot(row.RunID)); err == nil && !ok {
			return Result{}, true, nil
		}
	}
	if err != nil {
		return Result{}, false, fmt.Errorf("actions: read profile again of run %s: %w", row.RunID, err)
	}
	asked := fmt.Sprintf("asked by %s at %s", who(held), time.UnixMilli(held.CreatedAt).UTC().Format("15:04 MST"))
	switch {
	case held.State == database.ActionPending:
		claimed, err := a.d.Tables.Actions.Claim(ctx, a.db(), held.ID, a.claimMS())
		if err != nil {
			return Result{}, false, fmt.Errorf("actions: resume %s: %w", held.ID, err)
		}
		if claimed {
			a.d.Log.Info("Resuming a profile again whose maker stopped mid-way.", zap.String("action", held.ID))
			res, err := a.again(ctx, held, req)
			return res, false, err
		}
		if held.ID == row.ID { // a retry of the click being carried out
			return Result{Result: "busy"}, false, nil
		}
		return Result{"busy", "Already profiling " + held.Arg + " again (" + asked + ")."}, false, nil
	case held.ID == row.ID:
		return Result{Result: "already"}, false, nil // a retry of a click already answered
	}
	ended, err := a.againEnded(ctx, held)
	if err != nil || ended {
		return Result{}, ended, err
	}
	return Result{"already", "Already profiling " + held.Arg + " again (" + asked + "): its comparison replies in this thread when it ends."}, false, nil
}

// againEnded frees the slot of a done action whose run has ended (or is
// gone) without freeing it; true when the slot is free now.
func (a *Actions) againEnded(ctx context.Context, held database.ActionRow) (bool, error) {
	id, err := a.d.Tables.Runs.ByKey(ctx, a.db(), AgainKey(held.ID))
	if err == nil {
		var r database.Run
		if r, err = a.d.Tables.Runs.Get(ctx, a.db(), id); err == nil && !r.FinishedAt.Valid {
			return false, nil
		}
	}
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return false, fmt.Errorf("actions: read the run of %s: %w", held.ID, err)
	}
	if err := a.d.Tables.Actions.Release(ctx, a.db(), held.ID); err != nil {
		return false, fmt.Errorf("actions: free the slot of %s: %w", held.ID, err)
	}
	return true, nil
}

// again asks the guard, then creates the run and finishes row in one
// transaction (write 2), or finishes it refused, with the guard's words.
func (a *Actions) again(ctx context.Context, row database.ActionRow, req vocab.LeaseRequest) (Result, error) {
	refusal, err := a.d.Guard.Peek(ctx, req)
	if err != nil {
		return Result{}, fmt.Errorf("actions: profile run %s again: the guard: %w", row.RunID, err)
	}
	if refusal != nil {
		why := RefusalWords(refusal)
		if _, err := a.finish(ctx, row, database.ActionFailed, "", why); err != nil {
			return Result{}, err
		}
		return Result{"guard", "Not profiled: " + why + "."}, nil
	}
	tx, err := a.db().BeginTx(ctx, nil)
	if err != nil {
		return Result{}, fmt.Errorf("actions: profile run %s again: %w", row.RunID, err)
	}
	defer tx.Rollback()
	runID, err := a.d.Again.Again(ctx, tx, row.RunID, row.ID)
	if err != nil {
		return Result{}, fmt.Errorf("actions: profile run %s again: %w", row.RunID, err)
	}
	ok, err := a.d.Tables.Actions.Finish(ctx, tx, row.ID, database.ActionDone, "", "")
	if err == nil && !ok {
		return Result{Result: "already"}, nil // another finished it: its answer stands
	}
	if err == nil {
		err = tx.Commit()
	}
	if err != nil {
		return Result{}, fmt.Errorf("actions: profile run %s again: %w", row.RunID, err)
	}
	a.d.Log.Info("Profiling again.", zap.String("run", row.RunID), zap.String("again", runID), zap.String("target", row.Arg))
	return Result{"done", fmt.Sprintf("Profiling %s again now (run %s): the comparison with the first capture replies in this thread when it ends.",
		row.Arg, runID)}, nil
}

// resumeAgain carries on a claimed pending "Profile again".
func (a *Actions) resumeAgain(ctx context.Context, r database.ActionRow) (Result, error) {
	if a.d.Again == nil {
		return Result{}, fmt.Errorf("%w: profile again is off", ErrUnknown)
	}
	req, ok, err := a.d.Again.ProfileStep(ctx, r.RunID)
	if err != nil {
		return Result{}, fmt.Errorf("actions: resume %s: %w", r.ID, err)
	}
	if !ok {
		return a.finish(ctx, r, database.ActionFailed, "", "the run's playbooks no longer have a profile step")
	}
	return a.again(ctx, r, req)
}

// guardNames say which guard refused, by vocab's refusal reasons.
var guardNames = map[string]string{
	vocab.RefusedBusy:     "the target is leased",
	vocab.RefusedPaused:   "profiling is paused",
	vocab.RefusedBudget:   "the profiling budget is spent",
	vocab.RefusedCooldown: "the target's profile cooldown holds",
	vocab.RefusedRecorded: "this capture was already recorded",
}

// RefusalWords says a refusal as the thread does: which guard, then its
// detail (who holds it, until when, when it frees).
func RefusalWords(r *vocab.ProfileRefusal) string {
	name, ok := guardNames[r.Reason]
	if !ok {
		name = "the profiling guard refused (" + r.Reason + ")"
	}
	if r.Detail == "" {
		return name
	}
	return name + ": " + r.Detail
}
