package vocab

// CONTRACT (lead, 2026-12-01): the profile step (capture/profile/) uses
// these; the runner implements ProfileGuard on its database (one migration),
// on the database's clock. Signatures are fixed; see the brief of each owner.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ProfileGuard is the durable, fleet-wide lock and budget over framed
// profiles: one capture per target across every replica, at most
// max_concurrent at once and max_per_hour started, a per-target cooldown, and
// the operators' pause. Env.Profiles; nil: tier 3 is not available (the step
// fails with ReasonBadConfig).
type ProfileGuard interface {
	// Acquire takes the target's lease for one run's step, atomically. A
	// step resumed after a crash (same run, plan and step) gets its lease
	// back: ProfileLease.Resumed then says what the earlier attempt made
	// durable. A refusal is a *ProfileRefusal.
	Acquire(ctx context.Context, req LeaseRequest) (ProfileLease, error)
	// Baseline returns the report kept for key (a model name, else the
	// target): the last capture kept with baseline=true, else the last one;
	// nil, nil when none is kept.
	Baseline(ctx context.Context, key string) (*KeptReport, error)
	// KeepReport stores a capture's analysis for later comparisons.
	KeepReport(ctx context.Context, key string, r KeptReport) error
}

// LeaseRequest asks for one target.
type LeaseRequest struct {
	// Target is the one server's base URL (scheme://host:port).
	Target              string
	RunID, Plan, StepID string
	// Hold is how long the lease lasts unless renewed (ProfileLease.Renew).
	Hold time.Duration
	// Cooldown refuses a start within this long of the target's last one.
	Cooldown time.Duration
}

// Lease states, as stored.
const (
	LeaseHeld       = "held"        // taken; start_profile not sent yet
	LeaseRecording  = "recording"   // start_profile may have been sent
	LeaseStopping   = "stopping"    // stop_profile sent, not answered yet
	LeaseStopFailed = "stop_failed" // the stop failed or hung: no new start until a later stop is answered or an operator clears it
	LeaseStopped    = "stopped"     // the server answered the stop: collecting
)

// Recording is what a lease has made durable.
type Recording struct {
	Target string `json:"target"`
	State  string `json:"state"`
	// Since is when the recording began and Deadline when it must be
	// stopped by, on the database's clock.
	Since    time.Time `json:"since"`
	Deadline time.Time `json:"deadline"`
	// Saved is what the step stored with Recording (its pre-start listing).
	Saved json.RawMessage `json:"saved,omitempty"`
	// StoppedBy names who got the stop answered when it was not an attempt
	// of the step: the runner's sweeper ("sweeper <replica>"), which stops a
	// recording whose owner died; "" otherwise. StoppedAt is when that
	// answer was recorded (the database's clock).
	StoppedBy string    `json:"stopped_by,omitempty"`
	StoppedAt time.Time `json:"stopped_at,omitzero"`
}

// ProfileLease is one held lease. Its methods may be called from the step's
// goroutines; each is one write to the shared store.
type ProfileLease interface {
	// Resumed is nil for a fresh lease, else the state an earlier attempt of
	// the same step left (recording, stopping, …): stop first, then collect.
	// State stopped: the server answered a stop (the earlier attempt's, or
	// the sweeper's when that attempt's process died past the deadline; the
	// runner keeps such a lease for profiling.collect_window): collect only.
	Resumed() *Recording
	// Recording makes "recording on T since S, stop by S+frame" durable. It
	// is called, and must have succeeded, before start_profile is sent. The
	// lease then ends at the deadline plus a short grace (the runner's
	// stopGrace, 1.5 s) however it is renewed: the step times its frame from
	// this write and records Stopping by then, or the sweeper claims the
	// lease and stops the server itself (the step then gets ErrLeaseLost and
	// sends no stop).
	Recording(ctx context.Context, frame time.Duration, saved json.RawMessage) (Recording, error)
	// Stopping records that stop_profile is being sent; the lease is held
	// for at least stopTimeout from now.
	Stopping(ctx context.Context, stopTimeout time.Duration) error
	// Stopped records that the server answered the stop.
	Stopped(ctx context.Context) error
	// StopFailed records a stop that failed or passed stop_timeout: the
	// target stays leased (no new start) until a later stop is answered (the
	// runner's sweeper retries) or an operator clears it. The lease is then
	// no longer this step's to release.
	StopFailed(ctx context.Context, reason string) error
	// Renew extends the lease by hold from now (the database's now): while
	// the frame records, and while a stopped capture's files are collected.
	Renew(ctx context.Context, hold time.Duration) error
	// Release ends the lease after a stopped capture was collected, or when
	// start_profile was never sent (state held).
	Release(ctx context.Context) error
	// NotStarted ends a lease in state recording whose start never began a
	// recording: start_profile answered 404 (not armed), never reached the
	// server, or was not sent because the step was cancelled. Without it the
	// lease would outlive its owner as a recording, and the sweeper would
	// stop a server that records nothing. The start still counts toward
	// max_per_hour and the target's cooldown.
	NotStarted(ctx context.Context, why string) error
	// StopRequested is closed when an operator asks for this capture to stop
	// now (POST /api/v1/runs/{id}/stop-profile, on any replica); Renew notices.
	StopRequested() <-chan struct{}
}

// KeptReport is one capture's analysis, kept for comparisons.
type KeptReport struct {
	RunID    string          `json:"run_id"`
	Target   string          `json:"target"`
	Baseline bool            `json:"baseline"`
	TakenAt  time.Time       `json:"taken_at"`
	Report   json.RawMessage `json:"report"` // a torchtrace.Report
}

// ErrLeaseLost: the lease is no longer this step's (the sweeper claimed it
// past its deadline, an operator cleared it, a resumed attempt took it
// back). Whoever holds it now owes the server its stop: the step must not
// send one too (vLLM counts a second stop as a stop while idle).
var ErrLeaseLost = errors.New("profile lease lost (taken over or cleared)")

// Why a lease is refused.
const (
	RefusedBusy     = "busy"     // another capture holds the target (or its stop failed)
	RefusedPaused   = "paused"   // an operator paused profiling
	RefusedBudget   = "budget"   // max_concurrent or max_per_hour
	RefusedCooldown = "cooldown" // the target was profiled less than cooldown ago
	RefusedRecorded = "recorded" // a resumed attempt of a step that already started a frame, whose lease is gone: no second start
)

// ProfileRefusal is Acquire's "no": the step is skipped with "<Reason>:
// <Detail>" (e.g. "paused: paused by 10.0.0.5 at 14:02: bad deploy") and the
// finding refused=<Reason>.
type ProfileRefusal struct {
	Reason string
	Detail string
	// Lost: the step's own earlier frame was recorded and stopped, and its
	// files were left on the server uncollected (RefusedRecorded). The step
	// fails instead of skipping, saying where the files are, so a run that
	// recorded a frame never ends succeeded without it.
	Lost bool
}

func (r *ProfileRefusal) Error() string {
	return fmt.Sprintf("profile refused (%s): %s", r.Reason, r.Detail)
}

// Profiling is the daemon's tier-3 policy (config `profiling:`), in Env.
type Profiling struct {
	// MaxDuration caps a step's duration (default 30 s).
	MaxDuration time.Duration
	// OptOutTargets are never profiled (host:port or base URLs).
	OptOutTargets []string
	// OptOutLabel, OptOutValue: an alert with this label set to this value
	// is never profiled (default autocapture_profile="off").
	OptOutLabel, OptOutValue string
	// AgentToken authenticates to `autocapture agent` sidecars.
	AgentToken string
}

// BaselineRef names the kept capture a report was compared with.
type BaselineRef struct {
	RunID    string    `json:"run_id"`
	TakenAt  time.Time `json:"taken_at"`
	Baseline bool      `json:"baseline"` // kept with baseline: true (else the previous capture)
}
