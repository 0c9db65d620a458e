package config

import (
	"bytes"
	"fmt"
	"net/url"
	"strings"
	"text/template"
	"time"

	"github.com/prometheus/common/model"
)

// Slack is the Slack notifier: one thread per run in a channel, posted with a
// bot token (chat:write, files:write, channels:history for retries).
type Slack struct {
	// Enabled turns the Slack notifier on: one thread per run, the parent
	// (alert, status, then the verdict), one reply per finished step, charts
	// uploaded into the thread. A block with a token and a channel but not
	// enabled is off, and check and serve say so.
	Enabled bool `yaml:"enabled" json:"enabled"`
	// Token is the bot token (xoxb-…) with chat:write, files:write and
	// channels:history (groups:history for a private channel); prints as
	// <secret>.
	Token Secret `yaml:"token" json:"token"`
	// TokenFile is the _file twin of Token.
	TokenFile string `yaml:"token_file" json:"token_file"`
	// APIURL is the Web API's base, ending in a slash (a stand-in's in tests).
	APIURL string `yaml:"api_url" json:"api_url"`
	// Channel is where threads go unless a routing label or the playbook
	// names another: a channel id (C0123456789) is best; a name (#alerts)
	// must first be resolved with conversations.list (channels:read).
	Channel string `yaml:"channel" json:"channel"`
	// SigningSecret verifies Slack's interactivity requests: it turns on the
	// verdict's right/wrong buttons and POST /hooks/slack/interactions (the
	// Slack app's Interactivity Request URL); empty: the parent has no
	// buttons.
	SigningSecret Secret `yaml:"signing_secret" json:"signing_secret"`
	// SigningSecretFile is the _file twin of SigningSecret.
	SigningSecretFile string `yaml:"signing_secret_file" json:"signing_secret_file"`
	// GrafanaURL is a Go template over the alert (.Labels, .Annotations,
	// .StartsAt, .FromMs and .ToMs for Grafana's from= and to=) for a
	// dashboard link on the parent, e.g.
	// https://grafana.example/d/vllm?var-instance={{ .Labels.instance | urlquery }}&from={{ .FromMs }}&to={{ .ToMs }}.
	// Its scheme and host are written out; labels fill only what follows
	// (use urlquery).
	GrafanaURL string `yaml:"grafana_url" json:"grafana_url"`
	// ChannelLabel names the alert label that routes a run's thread to
	// another channel (it wins over the playbook's notify.channel, which wins
	// over Channel); "" turns routing by label off.
	ChannelLabel string `yaml:"channel_label" json:"channel_label"`
	// PostSkipped also posts a reply for skipped steps (default: only the
	// steps that ran, failed or were cancelled).
	PostSkipped bool `yaml:"post_skipped" json:"post_skipped"`
	// Pace spaces posts per channel per process: Slack allows about one a
	// second with short bursts, and a storm of runs queues behind it (N
	// replicas may post N times the pace; a 429 is waited out).
	Pace Pace `yaml:"pace" json:"pace"`
	// Actions are the buttons that act from the thread (a silence in
	// Alertmanager), and who may press them.
	Actions SlackActions `yaml:"actions" json:"actions"`
}

// Pace is a token bucket: per_second posts a second on average, burst at once.
type Pace struct {
	// PerSecond is the posts a second per channel, on average.
	PerSecond float64 `yaml:"per_second" json:"per_second"`
	// Burst is how many posts may go at once.
	Burst int `yaml:"burst" json:"burst"`
}

// DefaultSlackAPIURL is Slack's Web API.
const DefaultSlackAPIURL = "https://slack.com/api/"

// GrafanaData is what the grafana_url template sees.
type GrafanaData struct {
	Labels      map[string]string
	Annotations map[string]string
	StartsAt    time.Time
	// FromMs and ToMs frame the alert for Grafana's from=/to= (epoch ms):
	// ten minutes before it started to thirty minutes after.
	FromMs, ToMs int64
}

// NewGrafanaData frames an alert for the grafana_url template.
func NewGrafanaData(labels, annotations map[string]string, startsAt time.Time) GrafanaData {
	return GrafanaData{Labels: labels, Annotations: annotations, StartsAt: startsAt,
		FromMs: startsAt.Add(-10 * time.Minute).UnixMilli(), ToMs: startsAt.Add(30 * time.Minute).UnixMilli()}
}

// GrafanaTemplate parses grafana_url; nil when it is empty. The validator and
// the notifier parse it the same way.
func (s Slack) GrafanaTemplate() (*template.Template, error) {
	if s.GrafanaURL == "" {
		return nil, nil
	}
	prefix, _, _ := strings.Cut(s.GrafanaURL, "{{")
	u, err := url.Parse(prefix)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("want an http(s) URL whose scheme and host are written out before any {{ }}, got %q", s.GrafanaURL)
	}
	return template.New("grafana_url").Option("missingkey=zero").Parse(s.GrafanaURL)
}

// RenderGrafanaURL fills the template for one alert and checks that the labels
// left the scheme and host as written.
func RenderGrafanaURL(t *template.Template, d GrafanaData) (string, error) {
	var b bytes.Buffer
	if err := t.Execute(&b, d); err != nil {
		return "", err
	}
	want, _ := url.Parse(strings.SplitN(t.Root.String(), "{{", 2)[0])
	got, err := url.Parse(b.String())
	if err != nil {
		return "", fmt.Errorf("rendered %q: %w", b.String(), err)
	}
	if want != nil && (got.Scheme != want.Scheme || !strings.EqualFold(got.Host, want.Host)) {
		return "", fmt.Errorf("rendered URL's host %q is not the template's %q", got.Host, want.Host)
	}
	return got.String(), nil
}

// checkSlack validates notify.slack; it is checked only when enabled, so a
// disabled section may be left half-filled.
func (v *validator) checkSlack(s Slack) {
	const p = "$.notify.slack"
	if s.ChannelLabel != "" && !model.LabelName(s.ChannelLabel).IsValidLegacy() {
		v.errorf(p+".channel_label", "%q is not a label name ([a-zA-Z_][a-zA-Z0-9_]*)", s.ChannelLabel)
	}
	if !s.Enabled {
		return
	}
	if s.Token.Blank() && s.TokenFile == "" {
		v.errorf(p+".enabled", "set without a token: set token or token_file (a bot token, xoxb-…)")
	}
	if strings.TrimSpace(s.Channel) == "" {
		v.errorf(p+".enabled", "set without a channel: set channel (a channel id such as C0123456789, or #name)")
	}
	if u, err := url.Parse(s.APIURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		v.errorf(p+".api_url", "want an http(s) URL, got %q", s.APIURL)
	} else if !strings.HasSuffix(s.APIURL, "/") {
		v.errorf(p+".api_url", "must end with a slash (method names are appended): %q", s.APIURL+"/")
	}
	if _, err := s.GrafanaTemplate(); err != nil {
		v.errorf(p+".grafana_url", "%v", err)
	}
	if s.Pace.PerSecond <= 0 {
		v.errorf(p+".pace.per_second", "must be positive")
	}
	if s.Pace.Burst < 1 {
		v.errorf(p+".pace.burst", "must be at least 1")
	}
}

// Interactive says whether Slack's buttons are on: Slack posts threads and a
// signing secret verifies what its buttons send back.
func (s Slack) Interactive() bool { return s.Enabled && !s.SigningSecret.Blank() }
