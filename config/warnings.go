package config

import "strings"

// Warnings are what a config that loads may not mean what its writer meant:
// one sentence each, naming the key path and what to set. `serve` logs them at
// startup and `check` prints them; neither refuses the config for them.
func (c *Config) Warnings() []string {
	var w []string
	if s := c.Notify.Slack; !s.Enabled && (!s.Token.Blank() || s.TokenFile != "") && strings.TrimSpace(s.Channel) != "" {
		w = append(w, "notify.slack has a token and a channel but enabled is not true: Slack is off; set notify.slack.enabled: true to post threads.")
	}
	return w
}
