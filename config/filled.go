package config

// Filled returns r with every zero field set from Default().Runs, so tests
// and embedders that build a Runs by hand (not through Load, which starts
// from Default) run on the same values: Default is the one place defaults
// are written. A zero lease_timeout becomes the default, or twice the
// heartbeat interval when that is longer. MaxArtifactBytes stays as it is:
// zero there means no cap (Load's default is 2 GiB).
func (r Runs) Filled() Runs {
	d := Default().Runs
	if r.MaxConcurrent <= 0 {
		r.MaxConcurrent = d.MaxConcurrent
	}
	if r.MaxAttempts <= 0 {
		r.MaxAttempts = d.MaxAttempts
	}
	if r.DefaultTimeout <= 0 {
		r.DefaultTimeout = d.DefaultTimeout
	}
	if r.HeartbeatInterval <= 0 {
		r.HeartbeatInterval = d.HeartbeatInterval
	}
	if r.LeaseTimeout <= 0 {
		r.LeaseTimeout = max(d.LeaseTimeout, 2*r.HeartbeatInterval)
	}
	if r.ShutdownGrace <= 0 {
		r.ShutdownGrace = d.ShutdownGrace
	}
	if r.Lookback <= 0 {
		r.Lookback = d.Lookback
	}
	if r.AbandonGrace <= 0 {
		r.AbandonGrace = d.AbandonGrace
	}
	return r
}

// Filled returns p with every zero field set from Default().Profiling, as
// Runs.Filled does for runs (the profiling plane takes its config through it).
func (p Profiling) Filled() Profiling {
	d := Default().Profiling
	if p.MaxConcurrent <= 0 {
		p.MaxConcurrent = d.MaxConcurrent
	}
	if p.MaxPerHour <= 0 {
		p.MaxPerHour = d.MaxPerHour
	}
	if p.SweepInterval <= 0 {
		p.SweepInterval = d.SweepInterval
	}
	if p.StopTimeout <= 0 {
		p.StopTimeout = d.StopTimeout
	}
	if p.CollectWindow <= 0 {
		p.CollectWindow = d.CollectWindow
	}
	return p
}
