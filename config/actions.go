package config

import (
	"fmt"
	"regexp"
)

// SlackActions are the buttons that act from a run's thread, and who may
// press them. Each needs notify.slack.signing_secret (Slack's signed
// interactivity requests).
type SlackActions struct {
	// Silence offers "Silence…" on the parent: a silence in Alertmanager
	// (alertmanager.urls) for 1 h, 4 h, 24 h or until the alert resolves,
	// and "Unsilence" on the thread's reply.
	Silence ActionAccess `yaml:"silence" json:"silence"`
	// Profile offers "Profile again" on the parent of a run whose playbook
	// has a profile step: the step taken now on the same instance, under
	// the profiling budget, leases and switches, compared in the thread.
	Profile ActionAccess `yaml:"profile" json:"profile"`
}

// ActionAccess turns one action on and says who may use it. Who must be
// chosen: users, user_groups, or everyone: true; an enabled action with
// none of them is a config error, never everyone by default.
type ActionAccess struct {
	// Enabled shows the action's button.
	Enabled bool `yaml:"enabled" json:"enabled"`
	// Everyone lets anyone who can click in the channel use it.
	Everyone bool `yaml:"everyone" json:"everyone"`
	// Users are Slack user ids (U0123ABCD) allowed to use it.
	Users []string `yaml:"users" json:"users"`
	// UserGroups are Slack user group ids (S0123ABCD) whose members may use
	// it, read with usergroups.users.list (usergroups:read) and cached.
	UserGroups []string `yaml:"user_groups" json:"user_groups"`
}

var (
	slackUserID  = regexp.MustCompile(`^[UW][A-Z0-9]{2,}$`)
	slackGroupID = regexp.MustCompile(`^S[A-Z0-9]{2,}$`)
)

// checkActions validates notify.slack.actions.
func (v *validator) checkActions(s Slack) {
	v.checkAction(s, s.Actions.Silence, "$.notify.slack.actions.silence")
	v.checkAction(s, s.Actions.Profile, "$.notify.slack.actions.profile")
}

// checkAction validates one action's access, at at.
func (v *validator) checkAction(s Slack, a ActionAccess, at string) {
	if !a.Enabled {
		return
	}
	if s.SigningSecret.Blank() && s.SigningSecretFile == "" {
		v.errorf(at+".enabled", "actions need notify.slack.signing_secret (Slack's signed interactivity requests)")
	}
	if !a.Everyone && len(a.Users) == 0 && len(a.UserGroups) == 0 {
		v.errorf(at, "say who may use it: users, user_groups, or everyone: true")
	}
	for i, u := range a.Users {
		if !slackUserID.MatchString(u) {
			v.errorf(fmt.Sprintf("%s.users[%d]", at, i), "want a Slack user id (U0123ABCD), got %q", u)
		}
	}
	for i, g := range a.UserGroups {
		if !slackGroupID.MatchString(g) {
			v.errorf(fmt.Sprintf("%s.user_groups[%d]", at, i), "want a Slack user group id (S0123ABCD), got %q", g)
		}
	}
}
