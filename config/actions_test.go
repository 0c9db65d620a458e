package config

import (
	"strings"
	"testing"
)

const slackBase = "notify:\n  slack:\n    enabled: true\n    token: xoxb-1\n    signing_secret: sig\n    channel: C0AUTOCAP\n"

// An enabled action must say who may use it: everyone is never the default.
func TestActionsRefuseUnchosenAudience(t *testing.T) {
	checkParseErrors(t, []parseErrCase{
		{"nobody chosen", "alertmanager:\n  urls: [http://127.0.0.1:9093]\n" + slackBase +
			"    actions:\n      silence:\n        enabled: true\n", []string{"say who may use it"}},
		{"no alertmanager", slackBase + "    actions:\n      silence:\n        enabled: true\n        everyone: true\n",
			[]string{"needs alertmanager.urls"}},
		{"bad user id", "alertmanager:\n  urls: [http://127.0.0.1:9093]\n" + slackBase +
			"    actions:\n      silence:\n        enabled: true\n        users: [alice]\n", []string{"users[0]", "Slack user id"}},
		{"bad url", "alertmanager:\n  urls: [\"ftp://x\"]\n", []string{"alertmanager.urls[0]"}},
	}, nil)
}

func TestActionsAcceptChosenAudience(t *testing.T) {
	for _, who := range []string{"everyone: true", "users: [U0ALICE]", "user_groups: [S0ONCALL]"} {
		y := "alertmanager:\n  urls: [http://127.0.0.1:9093, http://127.0.0.1:9094]\n" + slackBase +
			"    actions:\n      silence:\n        enabled: true\n        " + who + "\n"
		cfg, err := Parse("c.yaml", []byte(y))
		if err != nil {
			t.Fatalf("%s: %v", who, err)
		}
		a := cfg.Notify.Slack.Actions.Silence
		if !a.Enabled || len(cfg.Alertmanager.URLs) != 2 || (strings.HasPrefix(who, "everyone") != a.Everyone) {
			t.Fatalf("%s: read %+v, alertmanager %+v", who, a, cfg.Alertmanager)
		}
	}
}

// "Profile again" has the Silence action's access rules, on its own: nobody
// chosen or a bad id is an error; it needs no Alertmanager.
func TestActionsProfileAccess(t *testing.T) {
	checkParseErrors(t, []parseErrCase{
		{"nobody chosen", slackBase + "    actions:\n      profile:\n        enabled: true\n",
			[]string{"notify.slack.actions.profile", "say who may use it"}},
		{"bad group id", slackBase + "    actions:\n      profile:\n        enabled: true\n        user_groups: [oncall]\n",
			[]string{"profile.user_groups[0]", "Slack user group id"}},
	}, nil)
	cfg, err := Parse("c.yaml", []byte(slackBase+"    actions:\n      profile:\n        enabled: true\n        users: [U0ALICE]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a := cfg.Notify.Slack.Actions; !a.Profile.Enabled || a.Silence.Enabled {
		t.Fatalf("read %+v, want Profile again alone", a)
	}
}
