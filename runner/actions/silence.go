package actions

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/runner/outbox"
	"github.com/autocapture/autocapture/silences"
)

// Silence silences c.RunID's alert for c.Choice. The run holds one live
// silence: a second click (a double click, another person) is told who
// holds it; a retry of the same click does nothing more.
func (a *Actions) Silence(ctx context.Context, c Click) (Result, error) {
	if a.d.AM == nil {
		return Result{}, errSilencesOff
	}
	d, ok := silenceFor[c.Choice]
	if !ok {
		return Result{}, fmt.Errorf("%w: silence choice %q", ErrUnknown, c.Choice)
	}
	if t, err := a.target(ctx, c.RunID); err != nil {
		return Result{}, err
	} else if !t.planned { // what it should match is chosen with its plans
		return Result{ResultUnplanned, "This run has not chosen its playbook yet, so what its silence should match " +
			"is not known: click again once its thread opens."}, nil
	}
	now, err := a.d.Dialect.Now(ctx, a.db())
	if err != nil {
		return Result{}, fmt.Errorf("actions: the store's clock: %w", err)
	}
	row := database.ActionRow{ID: KindSilence + "/" + c.RunID + "/" + c.Interaction, RunID: c.RunID, Kind: KindSilence,
		Arg: c.Choice, UserID: c.UserID, UserName: c.UserName, Slot: sql.NullString{String: c.RunID, Valid: true},
		EndsAt: sql.NullInt64{Int64: now + d.Milliseconds(), Valid: true}}
	// Write 1: the pending row, before the call.
	wrote, err := a.d.Tables.Actions.Begin(ctx, a.db(), row, a.claimMS())
	if err != nil {
		return Result{}, fmt.Errorf("actions: record the silence of run %s: %w", c.RunID, err)
	}
	if !wrote {
		return a.taken(ctx, row)
	}
	return a.silence(ctx, row)
}

// taken answers a click whose row, or whose run's slot, is already taken:
// a pending action whose maker died is resumed; any other is reported.
func (a *Actions) taken(ctx context.Context, row database.ActionRow) (Result, error) {
	held, err := a.d.Tables.Actions.Get(ctx, a.db(), row.ID)
	if errors.Is(err, sql.ErrNoRows) {
		var ok bool
		held, ok, err = a.d.Tables.Actions.BySlot(ctx, a.db(), row.RunID)
		if err == nil && !ok { // freed between our insert and this read: try once more
			return a.Silence(ctx, Click{RunID: row.RunID, Choice: row.Arg, Interaction: row.ID + "+", UserID: row.UserID, UserName: row.UserName})
		}
	}
	if err != nil {
		return Result{}, fmt.Errorf("actions: read the silence of run %s: %w", row.RunID, err)
	}
	if held.State == database.ActionPending {
		if claimed, err := a.d.Tables.Actions.Claim(ctx, a.db(), held.ID, a.claimMS()); err != nil {
			return Result{}, fmt.Errorf("actions: resume %s: %w", held.ID, err)
		} else if claimed {
			a.d.Log.Info("Resuming a silence whose maker stopped mid-way.", zap.String("action", held.ID))
			return a.silence(ctx, held)
		}
		if held.ID == row.ID { // a retry of the click being carried out: its reply says it
			return Result{Result: "busy"}, nil
		}
		return Result{"busy", fmt.Sprintf("%s is silencing this alert right now.", who(held))}, nil
	}
	if held.ID == row.ID {
		return Result{Result: "already"}, nil // a retry of a click already answered in the thread
	}
	return Result{"already", fmt.Sprintf("Already silenced by %s until %s (silence %s).", who(held),
		time.UnixMilli(held.EndsAt.Int64).UTC().Format("2006-01-02 15:04 MST"), held.SilenceID.String)}, nil
}

// errSilencesOff answers a silence's click when no Alertmanager is
// configured (alertmanager.urls).
var errSilencesOff = fmt.Errorf("%w: silences are off (no alertmanager.urls)", ErrUnknown)

// silence makes (or finds) row's silence, then finishes the row.
func (a *Actions) silence(ctx context.Context, row database.ActionRow) (Result, error) {
	t, err := a.target(ctx, row.RunID)
	if err != nil {
		return Result{}, err
	}
	s := silences.Silence{Matchers: t.matchers(), EndsAt: time.UnixMilli(row.EndsAt.Int64),
		CreatedBy: who(row), Comment: a.comment(row)}
	if len(s.Matchers) == 0 { // never silence everything
		res, err := a.finish(ctx, row, database.ActionFailed, "", noMatchers(t))
		if err == nil {
			res.Result = ResultUnmatched
		}
		return res, err
	}
	// The call: Ensure finds a silence an earlier, killed attempt made.
	id, _, err := a.d.AM.Ensure(ctx, s)
	if err != nil {
		return a.finish(ctx, row, database.ActionFailed, "", err.Error())
	}
	return a.finish(ctx, row, database.ActionDone, id, "")
}

// noMatchers says why a silence was refused for want of matchers.
func noMatchers(t target) string {
	return fmt.Sprintf("the alert carries none of the labels its silence matches on (%s), and a silence "+
		"without matchers would silence every alert", strings.Join(t.names, ", "))
}

// comment is the silence's comment: it links the run, so that a resumed
// action, or one whose call timed out after Alertmanager made the silence,
// finds the run's live silence instead of making a second.
func (a *Actions) comment(row database.ActionRow) string {
	link := row.RunID
	if a.d.RunURL != nil {
		link = a.d.RunURL(row.RunID)
	}
	return fmt.Sprintf("Silenced with autocapture (Slack thread or run page): run %s", link)
}

// Unsilence expires the silence action c.SilenceAction made. One unsilence
// per silence: a second click or a retry is told it is done.
func (a *Actions) Unsilence(ctx context.Context, c Click) (Result, error) {
	if a.d.AM == nil {
		return Result{}, errSilencesOff
	}
	s, err := a.d.Tables.Actions.Get(ctx, a.db(), c.SilenceAction)
	if errors.Is(err, sql.ErrNoRows) || err == nil && s.Kind != KindSilence {
		return Result{}, fmt.Errorf("%w: silence action %q", ErrUnknown, c.SilenceAction)
	}
	if err != nil {
		return Result{}, fmt.Errorf("actions: read %s: %w", c.SilenceAction, err)
	}
	if s.State != database.ActionDone || !s.SilenceID.Valid {
		return Result{"already", "That silence was never made; nothing to expire."}, nil
	}
	row := database.ActionRow{ID: KindUnsilence + "/" + s.ID, RunID: s.RunID, Kind: KindUnsilence, Arg: s.ID,
		UserID: c.UserID, UserName: c.UserName}
	wrote, err := a.d.Tables.Actions.Begin(ctx, a.db(), row, a.claimMS())
	if err != nil {
		return Result{}, fmt.Errorf("actions: record the unsilence of %s: %w", s.ID, err)
	}
	if !wrote {
		held, err := a.d.Tables.Actions.Get(ctx, a.db(), row.ID)
		if err != nil {
			return Result{}, fmt.Errorf("actions: read %s: %w", row.ID, err)
		}
		took, err := a.retake(ctx, held, c)
		if err != nil || !took {
			return Result{"already", fmt.Sprintf("%s already expired that silence.", who(held))}, err
		}
		row = held
		if held.State == database.ActionFailed { // rearmed: the clicker's, a new attempt
			row.UserID, row.UserName, row.Attempt = c.UserID, c.UserName, held.Attempt+1
		}
	}
	return a.unsilence(ctx, row, s)
}

// retake takes an unsilence already written: a pending one whose maker
// died, or a failed one clicked again (the button stays usable).
func (a *Actions) retake(ctx context.Context, held database.ActionRow, c Click) (bool, error) {
	switch held.State {
	case database.ActionPending:
		return a.d.Tables.Actions.Claim(ctx, a.db(), held.ID, a.claimMS())
	case database.ActionFailed:
		return a.d.Tables.Actions.Rearm(ctx, a.db(), held.ID, c.UserID, c.UserName, a.claimMS())
	}
	return false, nil
}

func (a *Actions) unsilence(ctx context.Context, row, s database.ActionRow) (Result, error) {
	if err := a.d.AM.Expire(ctx, s.SilenceID.String); err != nil {
		// Failed: the row is finished failed; a new click rearms it (retake).
		return a.finish(ctx, row, database.ActionFailed, s.SilenceID.String, err.Error())
	}
	return a.finish(ctx, row, database.ActionDone, s.SilenceID.String, "")
}

// finish records row's outcome and the thread's reply in one transaction
// (write 2): a kill -9 before its commit leaves the row pending, which a
// resume finishes; after it, both.
func (a *Actions) finish(ctx context.Context, row database.ActionRow, state, silenceID, detail string) (Result, error) {
	tx, err := a.db().BeginTx(ctx, nil)
	if err != nil {
		return Result{}, fmt.Errorf("actions: finish %s: %w", row.ID, err)
	}
	defer tx.Rollback()
	ok, err := a.d.Tables.Actions.Finish(ctx, tx, row.ID, state, silenceID, detail)
	if err == nil && ok && row.Kind == KindUnsilence && state == database.ActionDone {
		err = a.d.Tables.Actions.Release(ctx, tx, row.Arg)
	}
	if err == nil && ok {
		ops := []outbox.Op{outbox.ActionDone{ID: replyID(row)}}
		if state == database.ActionDone { // the parent shows the silence, or no longer
			ops = append(ops, outbox.ParentEdit{ID: replyID(row)})
		}
		err = a.d.Outbox.Append(ctx, tx, row.RunID, ops...)
	}
	if err == nil {
		err = tx.Commit()
	}
	if err != nil {
		return Result{}, fmt.Errorf("actions: finish %s: %w", row.ID, err)
	}
	if state == database.ActionFailed {
		return Result{Result: "failed"}, nil
	}
	return Result{Result: "done"}, nil
}

// replyID names an action's reply: its id, and for a failed action taken
// again, the attempt (each attempt's outcome is its own reply).
func replyID(r database.ActionRow) string {
	if r.Attempt == 0 {
		return r.ID
	}
	return r.ID + attemptSep + strconv.Itoa(r.Attempt)
}

// attemptSep separates an action's id from its attempt in a reply's id; ids
// hold no "#" (run ids, Slack timestamps).
const attemptSep = "#"

// who names a person as Alertmanager's createdBy and the thread show them.
func who(r database.ActionRow) string {
	if r.UserName == "" {
		return r.UserID
	}
	return r.UserName + " (" + r.UserID + ")"
}
