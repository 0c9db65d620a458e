package actions

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/runner/outbox"
	"github.com/autocapture/autocapture/silences"
)

var _ outbox.ActionContent = (*Actions)(nil)

// ActionReply is the thread's reply for action id, from its row as it is at
// delivery: who silenced what until when (with Unsilence while the silence
// holds), who expired it, or why nothing was done and what to do.
func (a *Actions) ActionReply(ctx context.Context, runID, key, id string, retry bool) (notify.StepReport, error) {
	id, _, _ = strings.Cut(id, attemptSep)
	row, err := a.d.Tables.Actions.Get(ctx, a.db(), id)
	if err != nil {
		return notify.StepReport{}, fmt.Errorf("actions: reply for %s: %w", id, err)
	}
	rep := notify.StepReport{RunID: runID, Key: key, Retry: retry}
	if row.Kind == KindProfile {
		return a.againReply(ctx, rep, row)
	}
	var t target
	if row.Kind == KindSilence {
		if t, err = a.target(ctx, row.RunID); err != nil {
			return notify.StepReport{}, err
		}
	}
	switch {
	case row.Kind == KindSilence && row.State == database.ActionDone:
		rep.Notice = fmt.Sprintf("%s silenced %s in Alertmanager %s (silence %s).", who(row),
			matcherText(t.matchers()), until(row), row.SilenceID.String)
		if row.Slot.Valid { // not yet expired
			rep.Buttons = []notify.Button{{Kind: notify.ButtonUnsilence, Value: row.ID, Text: "Unsilence"}}
		}
	case row.Kind == KindSilence && len(t.matchers()) == 0: // refused: no matcher left
		rep.Notice = fmt.Sprintf("%s's silence was not made: %s. Nothing is silenced; silence it in "+
			"Alertmanager by hand, or name labels the alert carries in the playbook's silence.matchers.", who(row), row.Detail)
	case row.Kind == KindSilence:
		rep.Notice = fmt.Sprintf("%s's silence was not made: %s. Nothing is silenced; check alertmanager.urls "+
			"and that Alertmanager is up, then click Silence again.", who(row), row.Detail)
	case row.Kind == KindUnsilence && row.State == database.ActionDone && row.UserID == resolvedUser:
		rep.Notice = fmt.Sprintf("The alert resolved: silence %s (until resolved) expired.", row.SilenceID.String)
	case row.Kind == KindUnsilence && row.State == database.ActionDone:
		rep.Notice = fmt.Sprintf("%s expired silence %s: the alert notifies again.", who(row), row.SilenceID.String)
	default:
		rep.Notice = fmt.Sprintf("%s's unsilence failed: %s. Silence %s still holds; click Unsilence again once "+
			"Alertmanager answers.", who(row), row.Detail, row.SilenceID.String)
	}
	return rep, nil
}

func until(r database.ActionRow) string {
	if r.Arg == "resolved" {
		return "until the alert resolves"
	}
	return "for " + r.Arg + ", until " + time.UnixMilli(r.EndsAt.Int64).UTC().Format("2006-01-02 15:04 MST")
}

func matcherText(ms []silences.Matcher) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = m.Name + "=" + m.Value
	}
	return strings.Join(parts, ", ")
}

// sweepEvery is how often pending actions whose maker died are resumed, and
// silences "until resolved" of resolved alerts expired.
const sweepEvery = 5 * time.Second

// Start starts the sweep (a lifecycle Loop): pending actions whose claim
// lapsed (their process died mid-call) are resumed every sweepEvery.
func (a *Actions) Start() {
	a.done = make(chan struct{})
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		t := time.NewTicker(sweepEvery)
		defer t.Stop()
		for {
			select {
			case <-a.done:
				return
			case <-t.C:
				a.sweepOnce(context.Background())
			}
		}
	}()
}

// Stop ends the sweep and waits for it.
func (a *Actions) Stop() {
	a.stop.Do(func() {
		if a.done != nil {
			close(a.done)
		}
	})
	a.wg.Wait()
}

func (a *Actions) sweepOnce(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, a.claim)
	defer cancel()
	if a.d.AM != nil {
		a.expireResolved(ctx)
	}
	stale, err := a.d.Tables.Actions.Stale(ctx, a.db(), 10)
	if err != nil {
		a.d.Log.Warn("The actions sweep could not read pending actions.", zap.Error(err))
		return
	}
	for _, r := range stale {
		claimed, err := a.d.Tables.Actions.Claim(ctx, a.db(), r.ID, a.claimMS())
		if err != nil || !claimed {
			continue
		}
		a.d.Log.Info("Resuming an action whose maker stopped mid-way.", zap.String("action", r.ID))
		if _, err := a.resume(ctx, r); err != nil {
			a.d.Log.Warn("A resumed action failed; it is tried again.", zap.String("action", r.ID), zap.Error(err))
		}
	}
}

// resume carries on a claimed pending action.
func (a *Actions) resume(ctx context.Context, r database.ActionRow) (Result, error) {
	if r.Kind == KindProfile {
		return a.resumeAgain(ctx, r)
	}
	if a.d.AM == nil {
		return Result{}, errSilencesOff
	}
	if r.Kind == KindUnsilence {
		s, err := a.d.Tables.Actions.Get(ctx, a.db(), r.Arg)
		if err != nil {
			return Result{}, fmt.Errorf("actions: resume %s: %w", r.ID, err)
		}
		return a.unsilence(ctx, r, s)
	}
	return a.silence(ctx, r)
}

// resolvedUser is who expires a silence "until resolved" when the alert
// resolves: autocapture itself.
const resolvedUser = "autocapture"

// expireResolved expires the silences "until resolved" whose alert has
// resolved, each as an unsilence action of autocapture's (one per silence:
// its id is the silence action's, so two replicas sweeping expire it once).
func (a *Actions) expireResolved(ctx context.Context) {
	due, err := a.d.Tables.Actions.ResolvedSilences(ctx, a.db(), 10)
	if err != nil {
		a.d.Log.Warn("The actions sweep could not read the silences of resolved alerts.", zap.Error(err))
		return
	}
	for _, s := range due {
		c := Click{SilenceAction: s.ID, Interaction: "resolved", UserID: resolvedUser, UserName: "the alert resolved"}
		if _, err := a.Unsilence(ctx, c); err != nil {
			a.d.Log.Warn("A silence of a resolved alert could not be expired; tried again.", zap.String("action", s.ID), zap.Error(err))
		}
	}
}
