package profiling

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/vocab"
)

// profileLease is one held lease (vocab.ProfileLease). Every write names
// the lease's token: a lease another process took over (the sweeper, a
// resumed attempt) or an operator cleared cannot be changed through it.
type profileLease struct {
	pl                        *Plane
	target, runID, plan, step string
	token                     string
	resumed                   *vocab.Recording
	stop                      chan struct{} // closed on an operator's stop request
	stopOnce                  sync.Once
	done                      chan struct{} // closed when the lease ends in this process
	doneOnce                  sync.Once
	mu                        sync.Mutex
	stopBy                    string
}

var _ vocab.ProfileLease = (*profileLease)(nil)

// Resumed is what an earlier attempt of the step made durable, or nil.
func (l *profileLease) Resumed() *vocab.Recording { return l.resumed }

// StopRequested is closed when an operator asked for this capture to stop.
func (l *profileLease) StopRequested() <-chan struct{} { return l.stop }

// StopRequestedBy names who asked for the stop ("" before anyone did), for
// the step's report. (Not in vocab.ProfileLease: assert for it.)
func (l *profileLease) StopRequestedBy() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stopBy
}

func (l *profileLease) requestStop(by string) {
	l.stopOnce.Do(func() {
		l.mu.Lock()
		l.stopBy = by
		l.mu.Unlock()
		close(l.stop)
	})
}

// end forgets the lease in this process (no more polling).
func (l *profileLease) end() {
	l.doneOnce.Do(func() {
		close(l.done)
		l.pl.untrackLease(l)
	})
}

// stopGrace is how long past its deadline a recording's owner has to record
// its stop before the sweeper may claim it. The owner's frame ends at the
// deadline (the step times it from the Recording write, not from the start's
// answer) and it records stopping at once; if it is slower than this the
// sweeper stops the server instead, once, and the owner, finding its lease
// lost, sends no second stop.
const stopGrace = 1500 * time.Millisecond

// Recording makes the recording durable, and counts the start, before
// start_profile is sent.
func (l *profileLease) Recording(ctx context.Context, frame time.Duration, saved json.RawMessage) (vocab.Recording, error) {
	if frame <= 0 {
		return vocab.Recording{}, fmt.Errorf("runner: profile %s: frame %v: want more than 0", l.target, frame)
	}
	pl := l.pl
	tx, err := pl.db.BeginTx(ctx, nil)
	if err != nil {
		return vocab.Recording{}, l.errorf("recording", err)
	}
	defer tx.Rollback()
	var savedArg sql.NullString
	if len(saved) > 0 {
		savedArg = sql.NullString{String: string(saved), Valid: true}
	}
	// lease_until: the deadline plus stopGrace. The owner renews within that
	// (Renew caps it there too) and records its stop at the deadline; a
	// dead owner's recording is the sweeper's stopGrace after its deadline,
	// not a whole hold (15 s) after its last renewal.
	since, deadline, err := pl.tables.ProfileLeases.Record(ctx, tx, l.target, l.token, vocab.LeaseHeld, vocab.LeaseRecording,
		frame.Milliseconds(), stopGrace.Milliseconds(), savedArg)
	if errors.Is(err, sql.ErrNoRows) {
		tx.Rollback() // SQLite has one connection: free it for the probe
		return vocab.Recording{}, l.wrongState(ctx, "recording", vocab.LeaseHeld)
	}
	if err != nil {
		return vocab.Recording{}, l.errorf("recording", err)
	}
	if err := pl.tables.ProfileStarts.Add(ctx, tx, l.target, l.runID, l.plan, l.step, since); err != nil {
		return vocab.Recording{}, l.errorf("recording", err)
	}
	if err := pl.profileEvent(ctx, tx, l.runID, l.target, pl.id, "recording", "stop by "+fmtMS(deadline)); err != nil {
		return vocab.Recording{}, err
	}
	if err := tx.Commit(); err != nil {
		return vocab.Recording{}, l.errorf("recording", err)
	}
	pl.log.Info("A profile is about to record.", zap.String("run", l.runID), zap.String("step", l.step),
		zap.String("target", l.target), zap.Time("deadline", fromMS(deadline)))
	return vocab.Recording{Target: l.target, State: vocab.LeaseRecording, Since: fromMS(since),
		Deadline: fromMS(deadline), Saved: saved}, nil
}

// Stopping records that stop_profile is being sent; the lease lasts at
// least stopTimeout from now.
func (l *profileLease) Stopping(ctx context.Context, stopTimeout time.Duration) error {
	return l.write(ctx, "stopping", "", func(tx *sql.Tx) (bool, error) {
		return l.pl.tables.ProfileLeases.Stopping(ctx, tx, l.target, l.token, vocab.LeaseStopping, stopTimeout.Milliseconds(),
			[3]string{vocab.LeaseRecording, vocab.LeaseStopping, vocab.LeaseStopFailed})
	})
}

// Stopped records that the server answered the stop.
func (l *profileLease) Stopped(ctx context.Context) error {
	return l.write(ctx, "stopped", "", func(tx *sql.Tx) (bool, error) {
		return l.pl.tables.ProfileLeases.Stopped(ctx, tx, l.target, l.token, vocab.LeaseStopped,
			[3]string{vocab.LeaseRecording, vocab.LeaseStopping, vocab.LeaseStopFailed})
	})
}

// StopFailed hands the lease to the sweeper: the target stays leased, and
// its stop is retried, until a stop is answered or an operator clears it.
func (l *profileLease) StopFailed(ctx context.Context, reason string) error {
	err := l.write(ctx, "stop_failed", clipReason(reason), func(tx *sql.Tx) (bool, error) {
		return l.pl.tables.ProfileLeases.StopFailed(ctx, tx, l.target, l.token, vocab.LeaseStopFailed, clipReason(reason))
	})
	if err == nil {
		l.pl.pm.stopFailures.Inc()
		l.pl.log.Warn("A profile's stop failed; the target stays leased and the sweeper retries the stop.",
			zap.String("run", l.runID), zap.String("step", l.step), zap.String("target", l.target), zap.String("reason", reason))
		l.end()
	}
	return err
}

// Renew extends the lease by hold from the database's now, and notices an
// operator's stop request.
func (l *profileLease) Renew(ctx context.Context, hold time.Duration) error {
	// A recording's lease never reaches past its deadline + stopGrace
	// (see Recording): renewing cannot keep a recording alive past it.
	stopAt, stopBy, err := l.pl.tables.ProfileLeases.Renew(ctx, l.pl.beat, l.target, l.token, vocab.LeaseRecording,
		hold.Milliseconds(), stopGrace.Milliseconds())
	if errors.Is(err, sql.ErrNoRows) {
		l.end()
		return fmt.Errorf("runner: profile %s: renew: %w", l.target, ErrLeaseLost)
	}
	if err != nil {
		return l.errorf("renew", err)
	}
	if stopAt.Valid {
		l.requestStop(stopBy)
	}
	return nil
}

// Release ends the lease: a stopped capture was collected, or start_profile
// was never sent. A lease still recording cannot be released: stop it first.
// NotStarted ends a recording that never began (vocab.ProfileLease).
func (l *profileLease) NotStarted(ctx context.Context, why string) error {
	pl := l.pl
	tx, err := pl.db.BeginTx(ctx, nil)
	if err != nil {
		return l.errorf("not started", err)
	}
	defer tx.Rollback()
	deleted, err := pl.tables.ProfileLeases.DeleteInState(ctx, tx, l.target, l.token, vocab.LeaseRecording)
	if err != nil {
		return l.errorf("not started", err)
	}
	if !deleted {
		tx.Rollback()
		return l.wrongState(ctx, "not started", vocab.LeaseRecording)
	}
	if err := pl.profileEvent(ctx, tx, l.runID, l.target, pl.id, "not_started", clipReason(why)); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return l.errorf("not started", err)
	}
	l.end()
	pl.log.Info("Ended a profile lease whose recording never began.", zap.String("run", l.runID), zap.String("step", l.step),
		zap.String("target", l.target), zap.String("why", why))
	return nil
}

func (l *profileLease) Release(ctx context.Context) error {
	pl := l.pl
	tx, err := pl.db.BeginTx(ctx, nil)
	if err != nil {
		return l.errorf("release", err)
	}
	defer tx.Rollback()
	deleted, err := pl.tables.ProfileLeases.DeleteInStates(ctx, tx, l.target, l.token, vocab.LeaseHeld, vocab.LeaseStopped)
	if err != nil {
		return l.errorf("release", err)
	}
	if !deleted {
		tx.Rollback()
		return l.wrongState(ctx, "release", vocab.LeaseHeld+" or "+vocab.LeaseStopped)
	}
	if err := pl.profileEvent(ctx, tx, l.runID, l.target, pl.id, "released", ""); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return l.errorf("release", err)
	}
	l.end()
	pl.log.Info("Released a profile lease.", zap.String("run", l.runID), zap.String("step", l.step), zap.String("target", l.target))
	return nil
}

// write runs one guarded UPDATE (update: false when it changed nothing)
// and records the event named what with detail.
func (l *profileLease) write(ctx context.Context, what, detail string, update func(*sql.Tx) (bool, error)) error {
	pl := l.pl
	tx, err := pl.db.BeginTx(ctx, nil)
	if err != nil {
		return l.errorf(what, err)
	}
	defer tx.Rollback()
	wrote, err := update(tx)
	if err != nil {
		return l.errorf(what, err)
	}
	if !wrote {
		tx.Rollback()
		return l.wrongState(ctx, what, "")
	}
	if err := pl.profileEvent(ctx, tx, l.runID, l.target, pl.id, what, detail); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return l.errorf(what, err)
	}
	return nil
}

// wrongState explains a guarded write that changed nothing: the lease is
// lost, or in a state the write does not apply to.
func (l *profileLease) wrongState(ctx context.Context, what, want string) error {
	state, err := l.pl.tables.ProfileLeases.State(ctx, l.pl.db, l.target, l.token)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		l.end()
		return fmt.Errorf("runner: profile %s: %s: %w", l.target, what, ErrLeaseLost)
	case err != nil:
		return l.errorf(what, err)
	case want == "":
		return fmt.Errorf("runner: profile %s: %s: the lease is %s", l.target, what, state)
	}
	return fmt.Errorf("runner: profile %s: %s: the lease is %s, want %s", l.target, what, state, want)
}

func (l *profileLease) errorf(what string, err error) error {
	return fmt.Errorf("runner: profile %s: %s: %w", l.target, what, err)
}

// clipReason bounds a stop failure's reason as stored.
func clipReason(r string) string {
	if len(r) > maxEventDetail {
		return r[:maxEventDetail]
	}
	return r
}
