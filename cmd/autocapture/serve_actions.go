package main

import (
	"fmt"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/handlers"
	"github.com/autocapture/autocapture/runner"
	"github.com/autocapture/autocapture/silences"
)

// actionsOptions turns the thread's actions on when Slack's interactivity
// and an action are configured (the Silence action with an Alertmanager,
// or Profile again); nil otherwise. A CA file that does not read is an
// error: serve stops.
func actionsOptions(cfg *config.Config) (*runner.ActionsOptions, error) {
	s := cfg.Notify.Slack
	silence := s.Actions.Silence.Enabled && len(cfg.Alertmanager.URLs) > 0
	if !s.Interactive() || (!silence && !s.Actions.Profile.Enabled) {
		return nil, nil
	}
	o := &runner.ActionsOptions{Timeout: cfg.Alertmanager.Timeout, URLs: len(cfg.Alertmanager.URLs),
		ExternalURL: cfg.Web.ExternalURL, Profile: s.Actions.Profile.Enabled}
	if silence {
		am, err := silences.New(cfg.Alertmanager)
		if err != nil {
			return nil, fmt.Errorf("alertmanager: %w", err)
		}
		o.Silencer = am
	}
	return o, nil
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
