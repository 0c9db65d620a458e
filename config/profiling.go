package config

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// Profiling is the daemon's policy for tier 3, the framed profile: a fleet
// budget every replica shares (through the database), a hard cap on a frame,
// how often a sweeper looks for recordings whose owner is gone, the opt-outs,
// and the token for `autocapture agent` sidecars.
type Profiling struct {
	// MaxConcurrent is how many captures may hold a target at once, over all
	// replicas (a target whose stop failed counts until a later stop is
	// answered or an operator clears it). Use POST /api/v1/profiling/pause,
	// not 0, to stop profiling.
	MaxConcurrent int `yaml:"max_concurrent" json:"max_concurrent"`
	// MaxPerHour is how many captures may start in any hour, over all replicas.
	MaxPerHour int `yaml:"max_per_hour" json:"max_per_hour"`
	// MaxDuration caps a profile step's duration (at most 5m): a longer one
	// is cut to it.
	MaxDuration time.Duration `yaml:"max_duration" json:"max_duration"`
	// SweepInterval is how often a sweeper (on every replica, on its own
	// ticker; its claims never stop one target twice) stops recordings past
	// their deadline whose owner is gone (kill -9, a lost replica): the
	// target gets its stop within deadline + 1.5 s + one interval. 100ms to
	// 1m.
	SweepInterval time.Duration `yaml:"sweep_interval" json:"sweep_interval"`
	// StopTimeout bounds one stop_profile the sweeper sends (a stop flushes
	// the trace and can take minutes); a stop that fails or passes it is
	// retried with a doubling backoff (at most 5m), the target leased as
	// stop_failed.
	StopTimeout time.Duration `yaml:"stop_timeout" json:"stop_timeout"`
	// CollectWindow is how long a recording the sweeper stopped (its owner
	// died) stays leased as stopped, its files still on the server, for a
	// resumed attempt of the same run's step to collect them without a new
	// start. Meanwhile another run's capture of that target is refused as
	// busy; once it passes, or the run ends, the target is released, the
	// files left on the server. 1s to 1h.
	CollectWindow time.Duration `yaml:"collect_window" json:"collect_window"`
	// OptOut names targets and alerts that are never profiled.
	OptOut ProfilingOptOut `yaml:"opt_out" json:"opt_out"`
	// AgentToken authenticates the daemon to `autocapture agent` sidecars
	// (never printed); without it a profile step is not configured.
	AgentToken Secret `yaml:"agent_token" json:"agent_token"`
	// AgentTokenFile is the _file twin of AgentToken.
	AgentTokenFile string `yaml:"agent_token_file" json:"agent_token_file"`
}

// ProfilingOptOut: targets listed here, and alerts carrying the label, are
// never profiled; the step says so.
type ProfilingOptOut struct {
	// Targets lists the targets never profiled: host:port or base URLs
	// (http(s)://host:port).
	Targets []string `yaml:"targets" json:"targets"`
	// Label opts out the alerts that carry it: name=value, an alert with
	// that label set to that value is not profiled. Empty: no label opts out.
	Label string `yaml:"label" json:"label"`
}

// The defaults of profiling:.
const (
	DefaultProfileMaxDuration   = 30 * time.Second
	DefaultProfileSweepInterval = 10 * time.Second
	DefaultProfileStopTimeout   = 10 * time.Minute
	DefaultProfileCollectWindow = 5 * time.Minute
	DefaultProfileOptOutLabel   = "autocapture_profile=off"
)

// MaxProfileDuration is the most profiling.max_duration may be: a frame is
// seconds of a busy server, and its trace grows with every second.
const MaxProfileDuration = 5 * time.Minute

// defaultProfiling is profiling: in Default.
func defaultProfiling() Profiling {
	return Profiling{MaxConcurrent: 1, MaxPerHour: 6, MaxDuration: DefaultProfileMaxDuration,
		SweepInterval: DefaultProfileSweepInterval, StopTimeout: DefaultProfileStopTimeout,
		CollectWindow: DefaultProfileCollectWindow,
		OptOut:        ProfilingOptOut{Label: DefaultProfileOptOutLabel}}
}

// OptOutLabel splits opt_out.label into its name and value ("", "" when unset).
func (p Profiling) OptOutLabel() (name, value string) {
	name, value, _ = strings.Cut(p.OptOut.Label, "=")
	return strings.TrimSpace(name), strings.TrimSpace(value)
}

// checkProfiling validates profiling:.
func (v *validator) checkProfiling(p Profiling) {
	const path = "$.profiling"
	if p.MaxConcurrent < 1 {
		v.errorf(path+".max_concurrent", "must be at least 1 (use POST /api/v1/profiling/pause to stop profiling)")
	}
	if p.MaxPerHour < 1 {
		v.errorf(path+".max_per_hour", "must be at least 1")
	}
	if p.MaxDuration <= 0 || p.MaxDuration > MaxProfileDuration {
		v.errorf(path+".max_duration", "%v: want more than 0 and at most %v", p.MaxDuration, MaxProfileDuration)
	}
	if p.SweepInterval < 100*time.Millisecond || p.SweepInterval > time.Minute {
		v.errorf(path+".sweep_interval", "%v: want 100ms to 1m (a recording whose owner died is stopped within one interval of its deadline)", p.SweepInterval)
	}
	if p.StopTimeout < time.Second {
		v.errorf(path+".stop_timeout", "%v: want at least 1s (a stop flushes the trace and can take minutes)", p.StopTimeout)
	}
	// A crashed run resumes within a minute (runs.lease_timeout + 2 x
	// heartbeat_interval is held to it): a shorter window may release the
	// files before the resumed attempt comes for them.
	if p.CollectWindow < time.Second || p.CollectWindow > time.Hour {
		v.errorf(path+".collect_window", "%v: want 1s to 1h (a swept recording's files wait this long for the run's resumed attempt; a run resumes within 1m)", p.CollectWindow)
	}
	for i, t := range p.OptOut.Targets {
		if err := checkProfileTarget(t); err != nil {
			v.errorf(fmt.Sprintf("%s.opt_out.targets[%d]", path, i), "%v", err)
		}
	}
	if l := p.OptOut.Label; l != "" {
		name, value := p.OptOutLabel()
		if !strings.Contains(l, "=") || !labelName.MatchString(name) || value == "" {
			v.errorf(path+".opt_out.label", "want name=value such as %s, got %q", DefaultProfileOptOutLabel, l)
		}
	}
}

// labelName is a Prometheus label name, as Alertmanager sends them.
var labelName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// checkProfileTarget accepts host:port or scheme://host:port.
func checkProfileTarget(t string) error {
	if strings.Contains(t, "://") {
		u, err := url.Parse(t)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("want host:port or http(s)://host:port, got %q", t)
		}
		return nil
	}
	if t == "" || strings.ContainsAny(t, "/ ") {
		return fmt.Errorf("want host:port or http(s)://host:port, got %q", t)
	}
	return nil
}
