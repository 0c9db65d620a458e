package config

import (
	"fmt"
	"strings"
)

// Warnings are what a config that loads may not mean what its writer meant:
// one sentence each, naming the key path and what to set. `serve` logs them at
// startup and `check` prints them; neither refuses the config for them.
func (c *Config) Warnings() []string {
	var w []string
	if s := c.Notify.Slack; !s.Enabled && (!s.Token.Blank() || s.TokenFile != "") && strings.TrimSpace(s.Channel) != "" {
		w = append(w, "notify.slack has a token and a channel but enabled is not true: Slack is off; set notify.slack.enabled: true to post threads.")
	}
	if p := c.Web.Auth.TrustedProxy; p != nil {
		ps, _ := p.Prefixes() // Parse refused any that does not parse
		for _, pr := range ps {
			if wide := pr.Addr().Is4() && pr.Bits() < 24 || !pr.Addr().Is4() && pr.Bits() < 64; wide {
				w = append(w, fmt.Sprintf("web.auth.trusted_proxy.from has %s: every address in it can sign in as any user "+
					"(its %s header); list the proxy's own addresses, not a network.", pr, p.Header))
			}
		}
	}
	return w
}
