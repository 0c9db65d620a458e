package config

import (
	"testing"
	"time"
)

func TestRunsFilled(t *testing.T) {
	want := Default().Runs
	want.MaxArtifactBytes = 0 // zero is no cap, kept as given
	if got := (Runs{}).Filled(); got != want {
		t.Errorf("a zero Runs filled:\n%+v\nwant Default's\n%+v", got, want)
	}
	r := Runs{MaxAttempts: 7, HeartbeatInterval: 30 * time.Second}.Filled()
	if r.MaxAttempts != 7 || r.HeartbeatInterval != 30*time.Second {
		t.Errorf("set fields changed: %+v", r)
	}
	if r.LeaseTimeout != 60*time.Second {
		t.Errorf("lease_timeout %v with a 30s heartbeat, want twice it (60s) when longer than the default", r.LeaseTimeout)
	}
	if r.MaxConcurrent != Default().Runs.MaxConcurrent {
		t.Errorf("max_concurrent %d, want the default %d", r.MaxConcurrent, Default().Runs.MaxConcurrent)
	}
}

func TestProfilingFilled(t *testing.T) {
	d := Default().Profiling
	got := (Profiling{MaxPerHour: 1}).Filled()
	if got.MaxPerHour != 1 {
		t.Errorf("max_per_hour %d, want the 1 given", got.MaxPerHour)
	}
	if got.MaxConcurrent != d.MaxConcurrent || got.SweepInterval != d.SweepInterval ||
		got.StopTimeout != d.StopTimeout || got.CollectWindow != d.CollectWindow {
		t.Errorf("filled %+v, want Default's for every zero field (%+v)", got, d)
	}
}
