package runner

import (
	"strings"
	"time"

	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/runner/actions"
	"github.com/autocapture/autocapture/runner/outbox"
)

// The thread's actions (runner/actions): a silence in Alertmanager from the
// Slack thread, and its end. Off unless Options.Actions names a Silencer.

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

// newActions builds the thread's actions of o over the runner's store and
// outbox; nil when they are off.
func newActions(o Options, d database.Dialect, tables database.Tables, store func() actions.Store, out actions.Appender) (*actions.Actions, error) {
	a := o.Actions
	if a == nil || a.Silencer == nil {
		return nil, nil
	}
	base := strings.TrimSuffix(a.ExternalURL, "/")
	return actions.New(actions.Deps{Store: store, Tables: tables, Dialect: d, Outbox: out, AM: a.Silencer,
		AMTimeout: a.Timeout, AMURLs: a.URLs, Log: o.Log.Named("actions"),
		RunURL: func(id string) string { return base + "/runs/" + id }})
}

// Actions are the thread's actions (Silence, Unsilence) for the Slack
// interactivity endpoint; nil when they are off.
func (s *Service) Actions() *actions.Actions { return s.life.Actions() }

// actionContent is act as the outbox reads an action's reply: nil (not a
// nil *Actions) when the actions are off.
func actionContent(act *actions.Actions) outbox.ActionContent {
	if act == nil {
		return nil
	}
	return act
}
