package profiling

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/vocab"
)

// A run resumed after its daemon died mid-frame can meet the sweeper at work
// on its own lease: when the restart comes after the recording's deadline
// (+ stopGrace) and after the run's lease (runs.lease_timeout), as a pod in
// CrashLoopBackOff does, the restarted daemon's sweeper claims the orphaned
// recording to stop it while its reaper hands the run to a worker. Refusing
// the resumed step then (busy) lost the frame: the run ended without it and
// the sweeper released the target with the files left on the server.
//
// Instead Acquire waits for the sweeper's stop. Answered: the lease is
// stopped with no owner (sweepStopped), and the step takes it over and
// collects the files with no second start. Failed: the lease is stop_failed
// and the step says so. Answered 404 (no profiler there now): the lease is
// gone and the step is refused "recorded". The wait is bounded by the claim's
// own length, profiling.stop_timeout + sweepClaimSlack (a claim that lapses is
// the step's to take over, and it stops the server itself), and by the step's
// context.

// sweepWaitPoll is how often a waiting step reads its lease again.
const sweepWaitPoll = 250 * time.Millisecond

// sweepingError: the sweeper holds the step's own lease, stopping the
// earlier attempt's recording (resumeLease).
type sweepingError struct {
	target, owner string
	until         int64
}

func (e *sweepingError) Error() string {
	return fmt.Sprintf("runner: profile lease %s: %s is stopping the earlier attempt's recording (claimed until %s)",
		e.target, e.owner, fmtMS(e.until))
}

// errLeaseMoved: the row changed between Acquire's read and its takeover.
var errLeaseMoved = errors.New("runner: the profile lease changed while it was taken over")

// sweepingOrMoved returns err when Acquire should wait and read again, else nil.
func sweepingOrMoved(err error) error {
	var sw *sweepingError
	if errors.As(err, &sw) || errors.Is(err, errLeaseMoved) {
		return err
	}
	return nil
}

// sweepWait is one resumed step's wait for the sweeper.
type sweepWait struct {
	pl     *Plane
	req    vocab.LeaseRequest
	began  time.Time
	bound  time.Duration
	logged bool
}

func (pl *Plane) newSweepWait(req vocab.LeaseRequest) *sweepWait {
	return &sweepWait{pl: pl, req: req, began: time.Now(), bound: pl.cfg.StopTimeout + sweepClaimSlack}
}

// next waits one poll before Acquire reads the lease again, or returns why
// it may not: the bound passed, or the step's context ended.
func (w *sweepWait) next(ctx context.Context, why error) error {
	var sw *sweepingError
	errors.As(why, &sw)
	if sw != nil && !w.logged {
		w.logged = true
		w.pl.log.Info("A resumed profile step waits for the sweeper to stop its earlier attempt's recording, then collects it.",
			zap.String("run", w.req.RunID), zap.String("step", w.req.StepID), zap.String("target", w.req.Target),
			zap.String("sweeper", sw.owner), zap.Time("claimed_until", fromMS(sw.until)))
	}
	waited := time.Since(w.began)
	if waited >= w.bound {
		if sw == nil {
			return fmt.Errorf("runner: profile lease %s: still changing after %s: %w", w.req.Target, waited.Round(time.Millisecond), why)
		}
		return &vocab.Error{Reason: vocab.ReasonTimeout, Err: fmt.Errorf(
			"runner: profile lease %s: %s was still stopping the earlier attempt's recording after %s "+
				"(profiling.stop_timeout %s + %s to record its answer); the frame's files stay on the server",
			w.req.Target, sw.owner, waited.Round(time.Millisecond), w.pl.cfg.StopTimeout, sweepClaimSlack)}
	}
	t := time.NewTimer(min(sweepWaitPoll, w.bound-waited))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("runner: profile lease %s: waited %s for the sweeper to stop the earlier attempt's recording: %w (%v)",
			w.req.Target, waited.Round(time.Millisecond), ctx.Err(), context.Cause(ctx))
	case <-t.C:
		return nil
	}
}

// done logs how a wait ended (nil w: there was none).
func (w *sweepWait) done(l *profileLease) {
	if w == nil || !w.logged {
		return
	}
	state := ""
	if l.resumed != nil {
		state = l.resumed.State
	}
	w.pl.log.Info("The sweeper is done with the earlier recording; the resumed profile step took its lease over.",
		zap.String("run", w.req.RunID), zap.String("step", w.req.StepID), zap.String("target", w.req.Target),
		zap.String("state", state), zap.Duration("waited", time.Since(w.began)))
}

// sweptStop fills rec with who got the stop of a swept lease answered, and
// when (its "stopped" event), for the step's report.
func (pl *Plane) sweptStop(ctx context.Context, tx *sql.Tx, cur *leaseRow, rec *vocab.Recording) error {
	actor, at, err := pl.tables.ProfileEvents.SweptStop(ctx, tx, cur.runID, cur.target)
	switch {
	case errors.Is(err, sql.ErrNoRows): // the row says swept; its event is not there
		rec.StoppedBy = strings.TrimSpace(sweeperOwner)
		return nil
	case err != nil:
		return fmt.Errorf("runner: profile lease %s: the sweeper's stop: %w", cur.target, err)
	}
	rec.StoppedBy, rec.StoppedAt = actor, fromMS(at)
	return nil
}
