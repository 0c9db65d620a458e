package main

import (
	"fmt"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/handlers"
	"github.com/autocapture/autocapture/runner"
	"github.com/autocapture/autocapture/silences"
)

// actionsOptions turns the thread's actions on when Slack's interactivity,
// the Silence action and an Alertmanager are all configured; nil otherwise.
// A CA file that does not read is an error: serve stops.
func actionsOptions(cfg *config.Config) (*runner.ActionsOptions, error) {
	s := cfg.Notify.Slack
	if !s.Interactive() || !s.Actions.Silence.Enabled || len(cfg.Alertmanager.URLs) == 0 {
		return nil, nil
	}
	am, err := silences.New(cfg.Alertmanager)
	if err != nil {
		return nil, fmt.Errorf("alertmanager: %w", err)
	}
	return &runner.ActionsOptions{Silencer: am, Timeout: cfg.Alertmanager.Timeout, URLs: len(cfg.Alertmanager.URLs),
		ExternalURL: cfg.Web.ExternalURL}, nil
}

// slackActions hands the interactivity endpoint the thread's actions.
func slackActions(cfg *config.Config, acts *runner.ActionsOptions, svc *runner.Service) *handlers.SlackActions {
	if acts == nil {
		return nil
	}
	s := cfg.Notify.Slack
	act := svc.Actions()
	if act == nil {
		return nil
	}
	return &handlers.SlackActions{Actions: act, Access: s.Actions, Token: s.Token, APIURL: s.APIURL}
}
