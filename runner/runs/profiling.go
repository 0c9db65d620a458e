package runs

import (
	"errors"
	"time"
)

// Errors of the profiling API (tier 3's kill switches).
var (
	// ErrNoCapture: the run holds no capture that a stop request can reach
	// (none, or its recording already stopped or failed to stop).
	ErrNoCapture = errors.New("runner: no capture recording for that run")
	// ErrNoLease: no capture holds that target.
	ErrNoLease = errors.New("runner: no capture holds that target")
	// ErrNotStuck: the target's lease is live (its owner stops it); only a
	// lease whose stop failed may be cleared.
	ErrNotStuck = errors.New("runner: the lease is not stuck")
)

// ProfilingStatus is GET /api/v1/profiling: the fleet pause, the leases held
// and the budget used, the same on every replica.
type ProfilingStatus struct {
	Paused   bool       `json:"paused"`
	PausedBy string     `json:"paused_by,omitempty"`
	PausedAt *time.Time `json:"paused_at,omitempty"`
	Reason   string     `json:"reason,omitempty"`
	// ResumedBy, ResumedAt: who lifted the last pause.
	ResumedBy string         `json:"resumed_by,omitempty"`
	ResumedAt *time.Time     `json:"resumed_at,omitempty"`
	Leases    []ProfileLease `json:"leases"`
	Budget    ProfileBudget  `json:"budget"`
}

// ProfileBudget is profiling.max_concurrent and max_per_hour against use.
type ProfileBudget struct {
	Active         int `json:"active"`
	MaxConcurrent  int `json:"max_concurrent"`
	StartsLastHour int `json:"starts_last_hour"`
	MaxPerHour     int `json:"max_per_hour"`
}

// ProfileLease is one target held by a capture (vocab.Lease* states).
type ProfileLease struct {
	Target     string    `json:"target"`
	RunID      string    `json:"run_id"`
	Plan       string    `json:"plan"`
	Step       string    `json:"step"`
	Owner      string    `json:"owner"`
	State      string    `json:"state"`
	AcquiredAt time.Time `json:"acquired_at"`
	// Since and Deadline: the recording's start and when it must be stopped.
	Since      *time.Time `json:"since,omitempty"`
	Deadline   *time.Time `json:"deadline,omitempty"`
	LeaseUntil time.Time  `json:"lease_until"`
	// StopRequestedAt, By: an operator's POST /api/v1/runs/{id}/stop-profile.
	StopRequestedAt *time.Time `json:"stop_requested_at,omitempty"`
	StopRequestedBy string     `json:"stop_requested_by,omitempty"`
	StopAttempts    int        `json:"stop_attempts,omitempty"`
	// Reason is why the last stop failed.
	Reason string `json:"reason,omitempty"`
}

// ProfileEvent is one entry of a capture's audit trail: acquired, recording,
// stop requested (by whom), stopped by the sweeper, stop failed, cleared.
type ProfileEvent struct {
	RunID  string    `json:"run_id"`
	Target string    `json:"target"`
	At     time.Time `json:"at"`
	Actor  string    `json:"actor"`
	Event  string    `json:"event"`
	Detail string    `json:"detail,omitempty"`
}

// RunProfile is GET /api/v1/runs/{id}/profile: the run's lease, if it holds
// one, and every event of its captures.
type RunProfile struct {
	Lease  *ProfileLease  `json:"lease,omitempty"`
	Events []ProfileEvent `json:"events"`
}
