package config

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSlackDefaultsAndFileTwins(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "slack-token")
	sig := filepath.Join(dir, "signing")
	os.WriteFile(tok, []byte("xoxb-canary-123\n"), 0o600)
	os.WriteFile(sig, []byte("sig-canary\n"), 0o600)
	y := "notify:\n  slack:\n    enabled: true\n    token_file: " + tok + "\n    signing_secret_file: " + sig + "\n    channel: C0AUTOCAP\n"
	cfg, err := Parse("c.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Notify.Slack
	if s.Token.Reveal() != "xoxb-canary-123" || s.SigningSecret.Reveal() != "sig-canary" {
		t.Fatalf("secrets not read from their files: %q %q", s.Token.Reveal(), s.SigningSecret.Reveal())
	}
	if s.APIURL != DefaultSlackAPIURL || s.Pace != (Pace{PerSecond: 1, Burst: 3}) || !cfg.Notify.Console.Enabled || s.ChannelLabel != "slack_channel" {
		t.Fatalf("defaults lost: %+v console %v", s, cfg.Notify.Console)
	}
	j, _ := json.Marshal(cfg)
	if strings.Contains(string(j), "canary") {
		t.Fatalf("a Slack secret printed: %s", j)
	}
}

func TestSlackValidationNamesLines(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o600)
	missing := filepath.Join(dir, "missing")
	on := "notify:\n  slack:\n    enabled: true\n"
	cases := []parseErrCase{
		{"no token", on + "    channel: C1\n", []string{"c.yaml:3:14: notify.slack.enabled: set without a token"}},
		{"no channel", on + "    token: xoxb-1\n", []string{"c.yaml:3:14: notify.slack.enabled: set without a channel"}},
		{"empty token file", on + "    channel: C1\n    token_file: " + empty + "\n",
			[]string{"c.yaml:5:17: notify.slack.token_file:", empty, "empty"}},
		{"missing token file", on + "    channel: C1\n    token_file: " + missing + "\n",
			[]string{"c.yaml:5:17: notify.slack.token_file:", missing}},
		{"empty signing secret file", "notify:\n  slack:\n    signing_secret_file: " + empty + "\n",
			[]string{"c.yaml:3:26: notify.slack.signing_secret_file:", empty}},
		{"api url without slash", on + "    channel: C1\n    token: x\n    api_url: http://127.0.0.1:1/api\n",
			[]string{"c.yaml:6:14: notify.slack.api_url: must end with a slash"}},
		{"api url not http", on + "    channel: C1\n    token: x\n    api_url: ftp://x/\n",
			[]string{"c.yaml:6:14: notify.slack.api_url: want an http(s) URL"}},
		{"grafana host from a label", on + "    channel: C1\n    token: x\n    grafana_url: 'https://{{ .Labels.host }}/d/x'\n",
			[]string{"c.yaml:6:18: notify.slack.grafana_url: want an http(s) URL whose scheme and host are written out"}},
		{"grafana bad template", on + "    channel: C1\n    token: x\n    grafana_url: 'https://g/d?x={{ .Labels.x '\n",
			[]string{"c.yaml:6:18: notify.slack.grafana_url:"}},
		{"pace", on + "    channel: C1\n    token: x\n    pace: {per_second: 0, burst: 0}\n",
			[]string{"notify.slack.pace.per_second: must be positive", "notify.slack.pace.burst: must be at least 1"}},
		{"unknown field", on + "    chanel: C1\n", []string{"c.yaml:4:5: unknown field \"chanel\""}},
		{"channel label not a label name", on + "    channel: C1\n    token: x\n    channel_label: slack-channel\n",
			[]string{"c.yaml:6:20: notify.slack.channel_label: \"slack-channel\" is not a label name"}},
	}
	checkParseErrors(t, cases, nil)
}

func TestSlackDisabledSectionIsNotChecked(t *testing.T) {
	if _, err := Parse("c.yaml", []byte("notify:\n  slack:\n    channel: ''\n    api_url: nope\n")); err != nil {
		t.Fatalf("a disabled slack section was validated: %v", err)
	}
}

func TestRenderGrafanaURL(t *testing.T) {
	s := Slack{GrafanaURL: "https://grafana.example/d/vllm?var-instance={{ .Labels.instance | urlquery }}&from={{ .FromMs }}&to={{ .ToMs }}"}
	tmpl, err := s.GrafanaTemplate()
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	got, err := RenderGrafanaURL(tmpl, NewGrafanaData(map[string]string{"instance": "10.0.0.7:8000"}, nil, at))
	if err != nil {
		t.Fatal(err)
	}
	want := "https://grafana.example/d/vllm?var-instance=10.0.0.7%3A8000&from=1795920600000&to=1795923000000"
	if got != want {
		t.Fatalf("got %s\nwant %s", got, want)
	}
	evil := Slack{GrafanaURL: "https://grafana.example{{ .Labels.x }}/d"}
	tmpl, err = evil.GrafanaTemplate()
	if err != nil {
		t.Fatal(err)
	}
	if u, err := RenderGrafanaURL(tmpl, NewGrafanaData(map[string]string{"x": ".evil.example"}, nil, at)); err == nil {
		t.Fatalf("a label moved the host: %s", u)
	}
}

// TestSlackWithTokenAndChannelButNotEnabledWarns: a slack section holding a
// token (or token_file) and a channel but not enabled: true loads, Slack off,
// with a warning naming the key to set. Before, it was silently off. A
// section that is enabled, or not filled in, warns of nothing.
func TestSlackWithTokenAndChannelButNotEnabledWarns(t *testing.T) {
	tok := writeFile(t, t.TempDir(), "token", "xoxb-canary\n")
	const want = "notify.slack has a token and a channel but enabled is not true: Slack is off; set notify.slack.enabled: true to post threads."
	for _, c := range []struct {
		name, yaml string
		warns      bool
	}{
		{"token and channel", "notify:\n  slack:\n    token: xoxb-canary\n    channel: C0AUTOCAP\n", true},
		{"token file and channel", "notify:\n  slack:\n    token_file: " + tok + "\n    channel: '#alerts'\n", true},
		{"enabled: false", "notify:\n  slack:\n    enabled: false\n    token: xoxb-canary\n    channel: C1\n", true},
		{"enabled", "notify:\n  slack:\n    enabled: true\n    token: xoxb-canary\n    channel: C1\n", false},
		{"channel only", "notify:\n  slack:\n    channel: C1\n", false},
		{"token only", "notify:\n  slack:\n    token: xoxb-canary\n", false},
		{"no slack", "runs:\n  max_concurrent: 2\n", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Parse("c.yaml", []byte(c.yaml))
			if err != nil {
				t.Fatal(err)
			}
			got := cfg.Warnings()
			switch {
			case c.warns && (len(got) != 1 || got[0] != want):
				t.Fatalf("warnings %q, want [%q]", got, want)
			case !c.warns && len(got) != 0:
				t.Fatalf("warnings %q, want none", got)
			}
			if strings.Contains(strings.Join(got, " "), "canary") {
				t.Fatalf("a warning shows the token: %q", got)
			}
		})
	}
	d := Default()
	if w := d.Warnings(); len(w) != 0 {
		t.Fatalf("the defaults warn: %q", w)
	}
}

// TestWideTrustedProxyRangeWarns: a trusted proxy's from wider than a /24
// (a /64 for IPv6) loads, with a warning naming the range; the proxy's own
// addresses say nothing.
func TestWideTrustedProxyRangeWarns(t *testing.T) {
	for _, tc := range []struct {
		from string
		warn string
	}{
		{"[10.42.3.17]", ""},
		{"[10.42.3.0/24, 'fd00::7']", ""},
		{"[10.42.0.0/16]", "web.auth.trusted_proxy.from has 10.42.0.0/16"},
		{"['fd00::/8']", "web.auth.trusted_proxy.from has fd00::/8"},
	} {
		cfg, err := Parse("c.yaml", []byte("web:\n  auth:\n    bearer_token: t0k3n-long-enough\n    trusted_proxy:\n      header: X-Forwarded-Email\n      from: "+tc.from+"\n"))
		if err != nil {
			t.Fatalf("%s: %v", tc.from, err)
		}
		got := strings.Join(cfg.Warnings(), "\n")
		if tc.warn == "" && got != "" || tc.warn != "" && !strings.Contains(got, tc.warn) {
			t.Errorf("from %s: warnings %q, want %q", tc.from, got, tc.warn)
		}
	}
}
