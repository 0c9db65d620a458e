package config

import "time"

// Storm shares one thread among many runs instead of a thread each. A
// playbook's notify.channel still picks the channel: each channel gets its
// own group.
type Storm struct {
	// Threshold: an Alertmanager group (one webhook) bringing more than this
	// many new firing alerts gets one thread for all of them: the parent a
	// table of them, one compact reply per run when it ends.
	Threshold int `yaml:"threshold" json:"threshold"`
	// Window: alerts of one alertname and model_name firing on several
	// instances within this long of the first, over any webhooks, share the
	// first one's thread (a fleet). 0 turns fleets off; at most 1h.
	Window time.Duration `yaml:"window" json:"window"`
}

// checkStorm validates notify.storm.
func (v *validator) checkStorm(s Storm) {
	if s.Threshold < 1 {
		v.errorf("$.notify.storm.threshold", "must be at least 1 (a webhook of more new alerts than this gets one thread)")
	}
	if s.Window < 0 {
		v.errorf("$.notify.storm.window", "must not be negative (0 turns fleet threads off)")
	}
	if s.Window > time.Hour {
		v.errorf("$.notify.storm.window", "at most 1h: a fleet thread gathers alerts that fire together, not a day's worth")
	}
}
