package slack

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"

	"github.com/autocapture/autocapture/internal/testkit/slackstub/slackspec"
)

// manifestFile is the Slack app manifest an operator creates the app from.
const manifestFile = "../../deploy/slack/app-manifest.yaml"

// TestAppManifestScopes: the shipped app manifest grants, for every Web API
// method the notifier calls (driveEverything calls each), one of the scopes
// Slack's description says lets a token call it, and grants nothing no call
// needs; its interactivity URL is the daemon's Slack route.
func TestAppManifestScopes(t *testing.T) {
	raw, err := os.ReadFile(manifestFile)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		OAuth struct {
			Scopes struct {
				Bot []string `yaml:"bot"`
			} `yaml:"scopes"`
		} `yaml:"oauth_config"`
		Settings struct {
			Interactivity struct {
				Enabled    bool   `yaml:"is_enabled"`
				RequestURL string `yaml:"request_url"`
			} `yaml:"interactivity"`
		} `yaml:"settings"`
	}
	if err := yaml.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s: %v", manifestFile, err)
	}
	granted := m.OAuth.Scopes.Bot
	if !m.Settings.Interactivity.Enabled || !strings.HasSuffix(m.Settings.Interactivity.RequestURL, "/hooks/slack/interactions") {
		t.Errorf("interactivity %+v: want enabled, at …/hooks/slack/interactions", m.Settings.Interactivity)
	}

	spec := slackspec.Load(t)
	stub := driveEverything(t)
	used := map[string]bool{}
	for _, c := range stub.Calls() {
		if c.Method == "upload" { // the bytes to an upload_url: no Web API method
			continue
		}
		meth, ok := spec.Method(c.Method)
		if !ok {
			t.Errorf("%s: not in Slack's description", c.Method)
			continue
		}
		if slices.Contains(meth.Scopes, "none") {
			continue
		}
		var any bool
		for _, s := range meth.Scopes {
			if slices.Contains(granted, s) {
				any, used[s] = true, true
			}
		}
		if !any {
			t.Errorf("%s needs one of %v; the manifest grants %v", c.Method, meth.Scopes, granted)
		}
	}
	for _, s := range granted {
		if !used[s] {
			t.Errorf("the manifest grants %s, which no call needs", s)
		}
	}
}
