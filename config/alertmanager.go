package config

import (
	"fmt"
	"time"
)

// Alertmanager is the Alertmanager (or HA pair) the Slack actions silence
// alerts in, through its API v2.
type Alertmanager struct {
	// URLs are the Alertmanager's base URLs (http://alertmanager:9093); an HA
	// pair lists both. A silence is made through the first that answers, and
	// gossip carries it to the others. Empty: the Silence action is off.
	URLs []string `yaml:"urls" json:"urls"`
	// Timeout bounds each call to Alertmanager.
	Timeout time.Duration `yaml:"timeout" json:"timeout"`
	// BearerToken is sent as Authorization: Bearer (a proxy in front of
	// Alertmanager); prints as <secret>.
	BearerToken Secret `yaml:"bearer_token" json:"bearer_token"`
	// BearerTokenFile is the _file twin of BearerToken.
	BearerTokenFile string `yaml:"bearer_token_file" json:"bearer_token_file"`
	// BasicAuth is a username and password sent instead; nil: none.
	BasicAuth *BasicAuth `yaml:"basic_auth" json:"basic_auth,omitempty"`
	// CAFile is a PEM bundle the Alertmanager's certificate is checked
	// against (https); empty: the system's roots.
	CAFile string `yaml:"ca_file" json:"ca_file"`
}

// checkAlertmanager validates alertmanager: URLs that parse, and the
// silence action's need of one.
func (v *validator) checkAlertmanager(c *Config) {
	for i, u := range c.Alertmanager.URLs {
		v.checkURL(fmt.Sprintf("$.alertmanager.urls[%d]", i), u)
	}
	if c.Alertmanager.Timeout < 0 {
		v.errorf("$.alertmanager.timeout", "want a positive duration, got %s", c.Alertmanager.Timeout)
	}
	if c.Notify.Slack.Actions.Silence.Enabled && len(c.Alertmanager.URLs) == 0 {
		v.errorf("$.notify.slack.actions.silence.enabled", "the Silence action needs alertmanager.urls")
	}
}
