package runner

import (
	"context"
	"strings"
	"time"

	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/runner/actions"
	"github.com/autocapture/autocapture/runner/outbox"
	"github.com/autocapture/autocapture/vocab"
)

// The thread's actions (runner/actions): a silence in Alertmanager from the
// Slack thread, and its end; a profile taken again. Off unless
// Options.Actions names a Silencer or turns Profile on.

// ActionsOptions turn the thread's actions on.
type ActionsOptions struct {
	// Silencer is the Alertmanager (*silences.Client).
	Silencer actions.Silencer
	// Timeout and URLs are alertmanager.timeout and how many
	// alertmanager.urls there are: they bound a call.
	Timeout time.Duration
	URLs    int
	// ExternalURL is web.external_url, for the run page's link in a
	// silence's comment and a profile's comparison.
	ExternalURL string
	// Profile turns "Profile again" on (notify.slack.actions.profile).
	Profile bool
}

// newActions builds the thread's actions of o over the runner's store and
// outbox; nil when they are off.
func newActions(o Options, d database.Dialect, tables database.Tables, store func() actions.Store, out actions.Appender,
	again actions.Againer, guard actions.Guard, link func(context.Context, string, vocab.Artifact) (notify.Link, bool)) (*actions.Actions, error) {
	a := o.Actions
	if a == nil || (a.Silencer == nil && !a.Profile) {
		return nil, nil
	}
	base := strings.TrimSuffix(a.ExternalURL, "/")
	deps := actions.Deps{Store: store, Tables: tables, Dialect: d, Outbox: out,
		AM: a.Silencer, AMTimeout: a.Timeout, AMURLs: a.URLs, Log: o.Log.Named("actions"),
		RunURL: func(id string) string { return base + "/runs/" + id }}
	if a.Profile {
		deps.Again, deps.Guard, deps.ReportLink = again, guard, link
	}
	return actions.New(deps)
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
