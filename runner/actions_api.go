package runner

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/runner/actions"
	"github.com/autocapture/autocapture/runner/outbox"
)

// The thread's actions (runner/actions): a silence in Alertmanager from the
// Slack thread, and its end. Off unless Options.Silencer is set.

// ActionsOptions turn the thread's actions on.
type ActionsOptions struct {
	// Silencer is the Alertmanager (*silences.Client).
	Silencer actions.Silencer
	// Timeout and URLs are alertmanager.timeout and how many
	// alertmanager.urls there are: they bound a call.
	Timeout time.Duration
	URLs    int
	// ExternalURL is web.external_url, for the run page's link in a
	// silence's comment.
	ExternalURL string
}

// actionsSweep is how often pending actions whose maker died are resumed.
const actionsSweep = 5 * time.Second

// ErrNoActions: the thread's actions are not configured.
var ErrNoActions = errors.New("runner: the thread's actions are off (alertmanager.urls, notify.slack.actions)")

func (s *Service) composeActions(o Options, d dialect, tables database.Tables) error {
	a := o.Actions
	if a == nil || a.Silencer == nil {
		return nil
	}
	base := strings.TrimSuffix(a.ExternalURL, "/")
	act, err := actions.New(actions.Deps{Store: func() actions.Store { return s.db }, Tables: tables, Dialect: d,
		Outbox: s.out, AM: a.Silencer, AMTimeout: a.Timeout, AMURLs: a.URLs, Log: o.Log.Named("actions"),
		RunURL: func(id string) string { return base + "/runs/" + id }})
	if err != nil {
		return err
	}
	s.act = act
	return nil
}

// actionContent is what the outbox reads an action's reply from.
func (s *Service) actionContent() outbox.ActionContent {
	if s.act == nil {
		return nil
	}
	return s.act
}

// Silence silences a run's alert from its thread (actions.Actions.Silence).
func (s *Service) Silence(ctx context.Context, c actions.Click) (actions.Result, error) {
	if s.act == nil {
		return actions.Result{}, ErrNoActions
	}
	return s.act.Silence(ctx, c)
}

// Unsilence expires a silence made from a thread.
func (s *Service) Unsilence(ctx context.Context, c actions.Click) (actions.Result, error) {
	if s.act == nil {
		return actions.Result{}, ErrNoActions
	}
	return s.act.Unsilence(ctx, c)
}

// RefusedAction keeps a click the access rules turned down.
func (s *Service) RefusedAction(ctx context.Context, c actions.Click, why string) error {
	if s.act == nil {
		return ErrNoActions
	}
	return s.act.Refused(ctx, c, why)
}

// startActions starts the sweep of pending actions; the returned stop ends it.
func (s *Service) startActions() {
	if s.act != nil {
		s.stopActions = s.act.Sweep(actionsSweep)
	}
}
