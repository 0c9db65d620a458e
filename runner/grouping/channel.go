package grouping

import (
	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/playbooks"
)

// Channel is where a run's thread goes: the alert's routing label
// (Deps.ChannelLabel, notify.slack.channel_label) when it carries one, else
// the first of plans that names a channel (a playbook's notify.channel), else
// "" (the notifier's default). Accept (for a fleet's or storm's channel) and
// the parent's open use it alike.
func (g *Grouper) Channel(a template.Alert, plans []*playbooks.Plan) string {
	if l := g.channelLabel; l != "" {
		if ch := a.Labels[l]; ch != "" {
			return ch
		}
	}
	for _, p := range plans {
		if p.Channel != "" {
			return p.Channel
		}
	}
	return ""
}
