package profiling

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// The operators' kill switches over tier 3 (the /api/v1/profiling routes):
// a fleet-wide pause persisted in the store (every replica's Acquire reads
// it), a stop request for one run's capture (a flag on its lease row the
// owner's poll or Renew notices, and the sweeper acts on when the owner is
// gone), and the clear of a lease whose stop failed. Each is logged with who
// asked and, where it concerns a run, kept in that run's profile events.

// pauseRow is autocapture_profile_pause's one row.
type pauseRow struct {
	paused     bool
	by, reason string
	at         int64
}

// detail is the refusal a paused Acquire gives.
func (p pauseRow) detail() string {
	return fmt.Sprintf("paused by %s at %s: %s", p.by, fmtMS(p.at), p.reason)
}

func (pl *Plane) readPause(ctx context.Context, q database.RowQuerier) (pauseRow, error) {
	r, err := pl.tables.ProfilePause.Get(ctx, q)
	p := pauseRow{paused: r.Paused, by: r.By, reason: r.Reason, at: r.At}
	if err != nil {
		return p, fmt.Errorf("runner: profiling pause: %w", err)
	}
	return p, nil
}

// PauseProfiling stops every replica from starting a capture until
// ResumeProfiling; captures recording now go on to their stop.
func (pl *Plane) PauseProfiling(ctx context.Context, by, reason string) (runs.ProfilingStatus, error) {
	if err := pl.tables.ProfilePause.Pause(ctx, pl.db, by, clipReason(reason)); err != nil {
		return runs.ProfilingStatus{}, fmt.Errorf("runner: pause profiling: %w", err)
	}
	pl.log.Warn("Profiling paused by an operator: no capture starts on any replica until it is resumed.",
		zap.String("by", by), zap.String("reason", reason))
	return pl.ProfilingStatus(ctx)
}

// ResumeProfiling lifts the pause.
func (pl *Plane) ResumeProfiling(ctx context.Context, by string) (runs.ProfilingStatus, error) {
	if err := pl.tables.ProfilePause.Resume(ctx, pl.db, by); err != nil {
		return runs.ProfilingStatus{}, fmt.Errorf("runner: resume profiling: %w", err)
	}
	pl.log.Warn("Profiling resumed by an operator.", zap.String("by", by))
	return pl.ProfilingStatus(ctx)
}

// ProfilingStatus is the pause, the leases held and the budget used.
func (pl *Plane) ProfilingStatus(ctx context.Context) (runs.ProfilingStatus, error) {
	p, err := pl.readPause(ctx, pl.db)
	if err != nil {
		return runs.ProfilingStatus{}, err
	}
	st := runs.ProfilingStatus{Paused: p.paused, Leases: []runs.ProfileLease{}}
	if p.at > 0 {
		at := fromMS(p.at)
		if p.paused {
			st.PausedBy, st.PausedAt, st.Reason = p.by, &at, p.reason
		} else {
			st.ResumedBy, st.ResumedAt = p.by, &at
		}
	}
	now, err := pl.dbNow(ctx, pl.db)
	if err != nil {
		return st, fmt.Errorf("runner: profiling status: %w", err)
	}
	leases, err := leasesOf(pl.tables.ProfileLeases.List(ctx, pl.db))
	if err != nil {
		return st, fmt.Errorf("runner: profiling status: %w", err)
	}
	for _, r := range leases {
		if !r.takeable(now) {
			st.Leases = append(st.Leases, r.api())
		}
	}
	cfg := pl.cfg
	st.Budget = runs.ProfileBudget{Active: len(st.Leases), MaxConcurrent: cfg.MaxConcurrent, MaxPerHour: cfg.MaxPerHour}
	if st.Budget.StartsLastHour, err = pl.tables.ProfileStarts.Since(ctx, pl.db, now-time.Hour.Milliseconds()); err != nil {
		return st, fmt.Errorf("runner: profiling status: %w", err)
	}
	return st, nil
}

// StopProfile asks the run's capture to stop now, on whichever replica holds
// it: runs.ErrNotFound for an unknown run, runs.ErrNoCapture when it holds no
// lease that has not stopped yet. It returns the (first) lease asked.
func (pl *Plane) StopProfile(ctx context.Context, runID, by string) (runs.ProfileLease, error) {
	if err := pl.runs.CheckRun(ctx, runID); err != nil {
		return runs.ProfileLease{}, err
	}
	tx, err := pl.db.BeginTx(ctx, nil)
	if err != nil {
		return runs.ProfileLease{}, fmt.Errorf("runner: stop profile of %s: %w", runID, err)
	}
	defer tx.Rollback()
	// A run may profile several targets: each is asked.
	hit, err := leasesOf(pl.tables.ProfileLeases.RequestStop(ctx, tx, runID, by,
		[3]string{vocab.LeaseHeld, vocab.LeaseRecording, vocab.LeaseStopping}))
	if err != nil {
		return runs.ProfileLease{}, fmt.Errorf("runner: stop profile of %s: %w", runID, err)
	}
	if len(hit) == 0 {
		return runs.ProfileLease{}, fmt.Errorf("%w: run %s", runs.ErrNoCapture, runID)
	}
	for _, r := range hit {
		if err := pl.profileEvent(ctx, tx, runID, r.target, by, "stop_requested", ""); err != nil {
			return runs.ProfileLease{}, err
		}
	}
	if err := tx.Commit(); err != nil {
		return runs.ProfileLease{}, fmt.Errorf("runner: stop profile of %s: %w", runID, err)
	}
	r := hit[0]
	local := pl.localStop(runID, r.stopBy)
	pl.log.Warn("An operator asked a capture to stop now.", zap.String("run", runID), zap.String("target", r.target),
		zap.String("state", r.state), zap.String("by", by), zap.Bool("held_here", local > 0))
	return r.api(), nil
}

// ClearProfileLease lets an operator release a target whose stop failed
// (the server will never answer: a pod that is gone), or one the sweeper
// stopped that waits out profiling.collect_window for its run's resumed
// attempt (the files stay on the server). runs.ErrNoLease when
// nothing holds it, runs.ErrNotStuck when its lease is live.
func (pl *Plane) ClearProfileLease(ctx context.Context, target, by string) (runs.ProfileLease, error) {
	target = normTarget(target)
	tx, err := pl.db.BeginTx(ctx, nil)
	if err != nil {
		return runs.ProfileLease{}, fmt.Errorf("runner: clear profile lease %s: %w", target, err)
	}
	defer tx.Rollback()
	r, err := leaseOf(pl.tables.ProfileLeases.GetForUpdate(ctx, tx, target))
	if errors.Is(err, sql.ErrNoRows) {
		return runs.ProfileLease{}, fmt.Errorf("%w: %s", runs.ErrNoLease, target)
	}
	if err != nil {
		return runs.ProfileLease{}, fmt.Errorf("runner: clear profile lease %s: %w", target, err)
	}
	if r.state != vocab.LeaseStopFailed && !r.swept() {
		return r.api(), fmt.Errorf("%w: %s is %s by run %s", runs.ErrNotStuck, target, r.state, r.runID)
	}
	why := "the stop had failed: " + r.reason
	if r.swept() {
		why = "the sweeper had stopped it; its files, not collected, stay on the server"
	}
	if err := pl.tables.ProfileLeases.Delete(ctx, tx, target, r.token); err != nil {
		return runs.ProfileLease{}, fmt.Errorf("runner: clear profile lease %s: %w", target, err)
	}
	if err := pl.profileEvent(ctx, tx, r.runID, target, by, "cleared", why); err != nil {
		return runs.ProfileLease{}, err
	}
	if err := tx.Commit(); err != nil {
		return runs.ProfileLease{}, fmt.Errorf("runner: clear profile lease %s: %w", target, err)
	}
	pl.log.Warn("An operator cleared a stuck profile lease ("+why+"): the target may be profiled again.",
		zap.String("target", target), zap.String("run", r.runID), zap.String("by", by), zap.String("reason", r.reason))
	return r.api(), nil
}

// RunProfile is the run's lease, if it holds one, and its capture events.
func (pl *Plane) RunProfile(ctx context.Context, runID string) (runs.RunProfile, error) {
	if err := pl.runs.CheckRun(ctx, runID); err != nil {
		return runs.RunProfile{}, err
	}
	// One snapshot: the sweeper commits a lease's state and its event
	// together, and read apart they showed an event beside a lease of before
	// it. SQLite's read-only (deferred, not immediate) transaction is a
	// snapshot from its first read; PostgreSQL needs repeatable read for one.
	opts := &sql.TxOptions{ReadOnly: true}
	if pl.dialect == database.Postgres {
		opts.Isolation = sql.LevelRepeatableRead
	}
	tx, err := pl.db.BeginTx(ctx, opts)
	if err != nil {
		return runs.RunProfile{}, fmt.Errorf("runner: profile of run %s: %w", runID, err)
	}
	defer tx.Rollback()
	out := runs.RunProfile{Events: []runs.ProfileEvent{}}
	r, err := leaseOf(pl.tables.ProfileLeases.LatestOfRun(ctx, tx, runID))
	switch {
	case err == nil:
		l := r.api()
		out.Lease = &l
	case !errors.Is(err, sql.ErrNoRows):
		return out, fmt.Errorf("runner: profile of run %s: %w", runID, err)
	}
	events, err := pl.tables.ProfileEvents.List(ctx, tx, runID)
	if err != nil {
		return out, fmt.Errorf("runner: profile of run %s: %w", runID, err)
	}
	for _, e := range events {
		out.Events = append(out.Events, runs.ProfileEvent{RunID: runID, Target: e.Target, At: fromMS(e.At),
			Actor: e.Actor, Event: e.Event, Detail: e.Detail})
	}
	return out, nil
}
