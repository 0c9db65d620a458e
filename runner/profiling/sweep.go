package profiling

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/capture/profile"
	"github.com/autocapture/autocapture/vocab"
)

// The profile sweeper repairs what a dead owner left, reading only the lease
// rows (never a process's memory). Every profiling.sweep_interval each replica
// (profileSweeper) looks at each lease whose lease_until passed (its owner stopped
// renewing):
//
//   - held: start_profile was never sent; the row is deleted (released).
//   - stopped: the server answered the stop, nobody collects; released.
//   - recording or stopping, past its deadline or with an operator's stop
//     request: claimed (owner "sweeper <id>", a new token, held for
//     stop_timeout) and stopped with profile.StopRecording through Env.Targets,
//     bounded by profiling.stop_timeout. Answered: the row stays, stopped with
//     no owner, for profiling.collect_window (sweepStopped), so the run's
//     resumed attempt collects the files with no new start; released when the
//     window passes or the run has ended. Failed or timed out: stop_failed,
//     retried with a backoff.
//   - stop_failed: claimed and stopped again the same way; an answered stop
//     leaves it stopped for the collect window as above.
//
// A claim is one guarded UPDATE (token and lease_until as read), so two
// sweeps never stop one target twice. Stops run in goroutines of this process
// (a hung stop must not hold a background worker for minutes); a shutdown cuts
// them and hands the claim back at once so another replica retries.

// maxStopBackoff bounds the wait between two stops of a stop_failed target.
const maxStopBackoff = 5 * time.Minute

// sweepClaimSlack is how long a sweeper's claim lasts past
// profiling.stop_timeout: time to record the stop's answer.
const sweepClaimSlack = time.Minute

// profileSweeper runs sweepProfiles every profiling.sweep_interval on every
// replica, on its own ticker like the runner's reaper: a kill -9 of River's
// elected leader must not hold the repair of its own recordings back by the
// leader's TTL (15 s). Claims are guarded UPDATEs, so replicas sweeping together never
// stop one target twice.
func (pl *Plane) profileSweeper() {
	defer pl.loops.Done()
	t := time.NewTicker(pl.cfg.SweepInterval)
	defer t.Stop()
	for {
		if err := pl.sweepProfiles(pl.bg); err != nil && pl.bg.Err() == nil {
			pl.log.Warn("The profile sweep failed; the next one tries again.", zap.Error(err))
		}
		select {
		case <-pl.bg.Done():
			return
		case <-t.C:
		}
	}
}

// sweepProfiles acts on every lease whose owner is gone (see above).
func (pl *Plane) sweepProfiles(ctx context.Context) error {
	pl.pm.sweeps.Inc()
	found, err := leasesOf(pl.tables.ProfileLeases.Sweepable(ctx, pl.db, vocab.LeaseRecording, vocab.LeaseStopping, vocab.LeaseStopped))
	if err != nil {
		return fmt.Errorf("runner: profile sweep: %w", err)
	}
	var errs []error
	for _, r := range found {
		var err error
		switch r.state {
		case vocab.LeaseHeld, vocab.LeaseStopped:
			err = pl.sweepRelease(ctx, r)
		default:
			err = pl.sweepStop(ctx, r)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// sweepRelease deletes a lease whose owner is gone and which records nothing.
func (pl *Plane) sweepRelease(ctx context.Context, r *leaseRow) error {
	why := "its owner is gone and start_profile was never sent"
	var now int64
	if r.swept() {
		now, _ = pl.dbNow(ctx, pl.db) // only for the wording: 0 reads as "the window passed"
	}
	switch {
	case r.swept() && r.until >= now:
		why = "the sweeper stopped its recording and the run ended without collecting the files (left on the server)"
	case r.swept():
		why = "the sweeper stopped its recording and no resumed attempt collected the files within profiling.collect_window (left on the server)"
	case r.state == vocab.LeaseStopped:
		why = "its owner is gone after the stop was answered; the files were not collected"
	}
	tx, err := pl.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("runner: profile sweep %s: %w", r.target, err)
	}
	defer tx.Rollback()
	// Guarded by the token as read (see ProfileLeases.SweepRelease).
	released, err := pl.tables.ProfileLeases.SweepRelease(ctx, tx, r.target, r.token, vocab.LeaseStopped)
	if err != nil {
		return fmt.Errorf("runner: profile sweep %s: %w", r.target, err)
	}
	if !released {
		return nil // renewed, or another sweep took it
	}
	if err := pl.profileEvent(ctx, tx, r.runID, r.target, sweeperOwner+pl.id, "released", why); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("runner: profile sweep %s: %w", r.target, err)
	}
	pl.pm.sweepActions.WithLabelValues("released").Inc()
	pl.log.Info("The profile sweeper released a lease: "+why+".", zap.String("run", r.runID), zap.String("target", r.target),
		zap.String("state", r.state), zap.String("owner", r.owner))
	return nil
}

// sweepStop claims a lease to stop and sends the stop in the background.
func (pl *Plane) sweepStop(ctx context.Context, r *leaseRow) error {
	cfg := pl.cfg
	token := uuid.NewString()
	claim := cfg.StopTimeout + sweepClaimSlack
	claimed, err := pl.tables.ProfileLeases.SweepClaim(ctx, pl.db, r.target, r.token, sweeperOwner+pl.id, token,
		vocab.LeaseRecording, vocab.LeaseStopping, claim.Milliseconds())
	if err != nil {
		return fmt.Errorf("runner: profile sweep %s: claim: %w", r.target, err)
	}
	if !claimed {
		return nil // renewed by its owner, or claimed by another sweep
	}
	why := "its owner is gone past the deadline " + fmtMS(r.deadline.Int64)
	switch {
	case r.state == vocab.LeaseStopFailed:
		why = fmt.Sprintf("retrying a stop that failed %d time(s): %s", r.attempts, r.reason)
	case r.stopAt.Valid && (!r.deadline.Valid || r.deadline.Int64 > r.until):
		why = "an operator (" + r.stopBy + ") asked for the stop and its owner is gone"
	}
	pl.log.Warn("The profile sweeper is stopping a capture: "+why+".", zap.String("run", r.runID),
		zap.String("target", r.target), zap.String("state", r.state), zap.String("owner", r.owner))
	if err := pl.profileEvent(ctx, pl.db, r.runID, r.target, sweeperOwner+pl.id, "sweeper_stopping", why); err != nil {
		pl.log.Warn("Could not record the sweeper's stop on the run.", zap.String("run", r.runID), zap.Error(err))
	}
	if !pl.live.startStop() { // shutting down: hand the claim back for another replica
		pl.handBack(r.target, token)
		return nil
	}
	go func() {
		defer pl.live.stops.Done()
		pl.sweeperStop(r, token)
	}()
	return nil
}

// sweeperStop sends the stop (bounded by stop_timeout) and records the answer.
func (pl *Plane) sweeperStop(r *leaseRow, token string) {
	cfg := pl.cfg
	ctx, cancel := context.WithTimeout(pl.bg, cfg.StopTimeout)
	defer cancel()
	var err error
	if pl.targets == nil {
		err = errors.New("no targets client (Env.Targets) to send the stop through")
	} else {
		err = profile.StopRecording(ctx, pl.targets, r.target, []byte(r.saved.String)) // in the recording's engine dialect
	}
	if err != nil && pl.bg.Err() != nil { // shutdown, not the server's answer
		pl.handBack(r.target, token)
		return
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("stop_profile not answered within profiling.stop_timeout %s", cfg.StopTimeout)
	}
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(pl.bg), 30*time.Second)
	defer wcancel()
	if err == nil {
		pl.sweepStopped(wctx, r, token)
		return
	}
	if errors.Is(err, profile.ErrNotArmed) {
		pl.sweepNothingRecords(wctx, r, token, err)
		return
	}
	pl.sweepStopFailed(wctx, r, token, err)
}

// sweepNothingRecords releases a lease whose server answered the stop with
// 404: it has no profiler now (it restarted unarmed, or never was armed), so
// nothing records there and no stop can ever be answered. Retrying, as for a
// failed stop, would hold the target (and a slot of max_concurrent) for
// ever.
func (pl *Plane) sweepNothingRecords(ctx context.Context, r *leaseRow, token string, cause error) {
	tx, err := pl.db.BeginTx(ctx, nil)
	if err == nil {
		defer tx.Rollback()
		err = pl.tables.ProfileLeases.Delete(ctx, tx, r.target, token)
	}
	if err == nil {
		err = pl.profileEvent(ctx, tx, r.runID, r.target, sweeperOwner+pl.id, "released",
			clipReason("stop_profile answered 404: the server has no profiler now, so nothing records there ("+cause.Error()+")"))
	}
	if err == nil {
		err = tx.Commit()
	}
	if err != nil {
		pl.log.Error("The sweeper could not release a lease whose server has no profiler; it is retried when the claim lapses.",
			zap.String("run", r.runID), zap.String("target", r.target), zap.Error(err))
		return
	}
	pl.pm.sweepActions.WithLabelValues("released_unarmed").Inc()
	pl.log.Warn("The profile sweeper released a lease: its server answered stop_profile with 404 (no profiler now).",
		zap.String("run", r.runID), zap.String("target", r.target))
}

// sweepStopped records a stop the sweeper got answered. The recording's
// files are still on the server, and the run may resume (its owner died, the
// reaper hands the run to a live replica): the lease stays, state stopped with
// no owner and its pre-start listing, for profiling.collect_window, so the
// resumed attempt of the same run's step gets it back (Resumed, state
// stopped) and collects with no new start. Meanwhile the target is busy to
// any other run. The sweep releases it when the window passes with nobody
// collecting, or as soon as the run has ended (it will never resume).
func (pl *Plane) sweepStopped(ctx context.Context, r *leaseRow, token string) {
	window := pl.cfg.CollectWindow
	tx, err := pl.db.BeginTx(ctx, nil)
	if err == nil {
		defer tx.Rollback()
		err = pl.tables.ProfileLeases.SweptStopped(ctx, tx, r.target, token, vocab.LeaseStopped, sweptReason, window.Milliseconds())
	}
	if err == nil {
		err = pl.profileEvent(ctx, tx, r.runID, r.target, sweeperOwner+pl.id, "stopped",
			fmt.Sprintf("the sweeper's stop_profile was answered; the files stay on the server for the run's resumed attempt to collect, "+
				"the target leased for profiling.collect_window %s", window))
	}
	if err == nil {
		err = tx.Commit()
	}
	if err != nil {
		pl.log.Error("The sweeper's stop was answered but could not be recorded; it is retried when the claim lapses.",
			zap.String("run", r.runID), zap.String("target", r.target), zap.Error(err))
		return
	}
	pl.pm.sweepActions.WithLabelValues("stopped").Inc()
	pl.log.Info("The profile sweeper stopped a capture; its files wait for the run's resumed attempt.", zap.String("run", r.runID),
		zap.String("target", r.target), zap.Duration("collect_window", window))
}

// sweptReason marks a lease the sweeper stopped for its dead owner: stopped,
// no owner, waiting for the run's resumed attempt to collect the files.
const sweptReason = "stopped by the sweeper after its owner died; the files await the run's resumed attempt"

// swept says whether r is a stopped recording waiting, ownerless, for its
// run's resumed attempt (sweepStopped).
func (r *leaseRow) swept() bool { return r.state == vocab.LeaseStopped && r.owner == "" }

// sweepStopFailed leaves the target leased as stop_failed, retried after a
// backoff that doubles with each failure (one sweep interval first).
func (pl *Plane) sweepStopFailed(ctx context.Context, r *leaseRow, token string, cause error) {
	attempts := r.attempts + 1
	backoff := pl.cfg.SweepInterval << min(attempts-1, 20)
	backoff = min(backoff, maxStopBackoff)
	reason := clipReason(cause.Error())
	tx, err := pl.db.BeginTx(ctx, nil)
	if err == nil {
		defer tx.Rollback()
		err = pl.tables.ProfileLeases.SweptStopFailed(ctx, tx, r.target, token, vocab.LeaseStopFailed, reason, attempts, backoff.Milliseconds())
	}
	if err == nil {
		err = pl.profileEvent(ctx, tx, r.runID, r.target, sweeperOwner+pl.id, vocab.LeaseStopFailed, reason)
	}
	if err == nil {
		err = tx.Commit()
	}
	pl.pm.stopFailures.Inc()
	pl.pm.sweepActions.WithLabelValues(vocab.LeaseStopFailed).Inc()
	if err != nil {
		pl.log.Error("The sweeper's stop failed and could not be recorded; it is retried when the claim lapses.",
			zap.String("run", r.runID), zap.String("target", r.target), zap.NamedError("stop", cause), zap.Error(err))
		return
	}
	pl.log.Warn("The profile sweeper could not stop a capture; the target stays leased and the stop is retried.",
		zap.String("run", r.runID), zap.String("target", r.target), zap.Int("attempts", attempts),
		zap.Duration("retry_in", backoff), zap.Error(cause))
}

// handBack ends the sweeper's claim at once, so another replica's sweep
// retries the stop (this one is shutting down).
func (pl *Plane) handBack(target, token string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // pl.bg is done
	defer cancel()
	if err := pl.tables.ProfileLeases.Lapse(ctx, pl.db, target, token); err != nil {
		pl.log.Warn("Could not hand a profile stop back on shutdown; another replica retries when the claim lapses.",
			zap.String("target", target), zap.Error(err))
	}
}
