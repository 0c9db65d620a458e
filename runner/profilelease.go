package runner

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/capture"
)

// profileLease is one held lease (capture.ProfileLease). Every write names
// the lease's token: a lease another process took over (the sweeper, a
// resumed attempt) or an operator cleared cannot be changed through it.
type profileLease struct {
	s                         *Service
	target, runID, plan, step string
	token                     string
	resumed                   *capture.Recording
	stop                      chan struct{} // closed on an operator's stop request
	stopOnce                  sync.Once
	done                      chan struct{} // closed when the lease ends in this process
	doneOnce                  sync.Once
	mu                        sync.Mutex
	stopBy                    string
}

var _ capture.ProfileLease = (*profileLease)(nil)

// Resumed is what an earlier attempt of the step made durable, or nil.
func (l *profileLease) Resumed() *capture.Recording { return l.resumed }

// StopRequested is closed when an operator asked for this capture to stop.
func (l *profileLease) StopRequested() <-chan struct{} { return l.stop }

// StopRequestedBy names who asked for the stop ("" before anyone did), for
// the step's report. (Not in capture.ProfileLease: assert for it.)
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
		l.s.untrackLease(l)
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
func (l *profileLease) Recording(ctx context.Context, frame time.Duration, saved json.RawMessage) (capture.Recording, error) {
	if frame <= 0 {
		return capture.Recording{}, fmt.Errorf("runner: profile %s: frame %v: want more than 0", l.target, frame)
	}
	s := l.s
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return capture.Recording{}, l.errorf("recording", err)
	}
	defer tx.Rollback()
	var savedArg any
	if len(saved) > 0 {
		savedArg = string(saved)
	}
	var since, deadline int64
	// lease_until: the deadline plus stopGrace. The owner renews within that
	// (Renew caps it there too) and records its stop at the deadline; a
	// dead owner's recording is the sweeper's stopGrace after its deadline,
	// not a whole hold (15 s) after its last renewal.
	err = tx.QueryRowContext(ctx, s.dialect.sql(`UPDATE autocapture_profile_leases SET state = $1, since = {now},
		deadline = {now} + $2, lease_until = {now} + $2 + $7, saved = $3 WHERE target = $4 AND token = $5 AND state = $6
		RETURNING since, deadline`),
		capture.LeaseRecording, frame.Milliseconds(), savedArg, l.target, l.token, capture.LeaseHeld,
		stopGrace.Milliseconds()).Scan(&since, &deadline)
	if errors.Is(err, sql.ErrNoRows) {
		tx.Rollback() // SQLite has one connection: free it for the probe
		return capture.Recording{}, l.wrongState(ctx, "recording", capture.LeaseHeld)
	}
	if err != nil {
		return capture.Recording{}, l.errorf("recording", err)
	}
	if err := s.tables.ProfileStarts.Add(ctx, tx, l.target, l.runID, l.plan, l.step, since); err != nil {
		return capture.Recording{}, l.errorf("recording", err)
	}
	if err := s.profileEvent(ctx, tx, l.runID, l.target, s.id, "recording", "stop by "+fmtMS(deadline)); err != nil {
		return capture.Recording{}, err
	}
	if err := tx.Commit(); err != nil {
		return capture.Recording{}, l.errorf("recording", err)
	}
	s.log.Info("A profile is about to record.", zap.String("run", l.runID), zap.String("step", l.step),
		zap.String("target", l.target), zap.Time("deadline", fromMS(deadline)))
	return capture.Recording{Target: l.target, State: capture.LeaseRecording, Since: fromMS(since),
		Deadline: fromMS(deadline), Saved: saved}, nil
}

// Stopping records that stop_profile is being sent; the lease lasts at
// least stopTimeout from now.
func (l *profileLease) Stopping(ctx context.Context, stopTimeout time.Duration) error {
	s := l.s
	q := `UPDATE autocapture_profile_leases SET state = $1, lease_until = ` + s.greatest("lease_until", "{now} + $2") +
		` WHERE target = $3 AND token = $4 AND state IN ($5, $6, $7)`
	return l.write(ctx, "stopping", q, capture.LeaseStopping, stopTimeout.Milliseconds(), l.target, l.token,
		capture.LeaseRecording, capture.LeaseStopping, capture.LeaseStopFailed)
}

// Stopped records that the server answered the stop.
func (l *profileLease) Stopped(ctx context.Context) error {
	q := `UPDATE autocapture_profile_leases SET state = $1, reason = '' WHERE target = $2 AND token = $3 AND state IN ($4, $5, $6)`
	return l.write(ctx, "stopped", q, capture.LeaseStopped, l.target, l.token,
		capture.LeaseRecording, capture.LeaseStopping, capture.LeaseStopFailed)
}

// StopFailed hands the lease to the sweeper: the target stays leased, and
// its stop is retried, until a stop is answered or an operator clears it.
func (l *profileLease) StopFailed(ctx context.Context, reason string) error {
	q := `UPDATE autocapture_profile_leases SET state = $1, reason = $2, owner = '', token = '',
		stop_attempts = stop_attempts + 1, lease_until = {now} WHERE target = $3 AND token = $4`
	err := l.write(ctx, "stop_failed", q, capture.LeaseStopFailed, clipReason(reason), l.target, l.token)
	if err == nil {
		l.s.pm.stopFailures.Inc()
		l.s.log.Warn("A profile's stop failed; the target stays leased and the sweeper retries the stop.",
			zap.String("run", l.runID), zap.String("step", l.step), zap.String("target", l.target), zap.String("reason", reason))
		l.end()
	}
	return err
}

// Renew extends the lease by hold from the database's now, and notices an
// operator's stop request.
func (l *profileLease) Renew(ctx context.Context, hold time.Duration) error {
	var stopAt sql.NullInt64
	var stopBy string
	// A recording's lease never reaches past its deadline + stopGrace
	// (see Recording): renewing cannot keep a recording alive past it.
	err := l.s.beat.QueryRowContext(ctx, l.s.dialect.sql(`UPDATE autocapture_profile_leases SET lease_until =
		CASE WHEN state = $4 AND deadline IS NOT NULL AND deadline + $5 < {now} + $1 THEN deadline + $5 ELSE {now} + $1 END
		WHERE target = $2 AND token = $3 RETURNING stop_requested_at, stop_requested_by`),
		hold.Milliseconds(), l.target, l.token, capture.LeaseRecording, stopGrace.Milliseconds()).Scan(&stopAt, &stopBy)
	if errors.Is(err, sql.ErrNoRows) {
		l.end()
		return fmt.Errorf("runner: profile %s: renew: %w", l.target, ErrProfileLeaseLost)
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
// NotStarted ends a recording that never began (capture.ProfileLease).
func (l *profileLease) NotStarted(ctx context.Context, why string) error {
	s := l.s
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return l.errorf("not started", err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `DELETE FROM autocapture_profile_leases WHERE target = $1 AND token = $2 AND state = $3`,
		l.target, l.token, capture.LeaseRecording)
	if err != nil {
		return l.errorf("not started", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		tx.Rollback()
		return l.wrongState(ctx, "not started", capture.LeaseRecording)
	}
	if err := s.profileEvent(ctx, tx, l.runID, l.target, s.id, "not_started", clipReason(why)); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return l.errorf("not started", err)
	}
	l.end()
	s.log.Info("Ended a profile lease whose recording never began.", zap.String("run", l.runID), zap.String("step", l.step),
		zap.String("target", l.target), zap.String("why", why))
	return nil
}

func (l *profileLease) Release(ctx context.Context) error {
	s := l.s
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return l.errorf("release", err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `DELETE FROM autocapture_profile_leases WHERE target = $1 AND token = $2 AND state IN ($3, $4)`,
		l.target, l.token, capture.LeaseHeld, capture.LeaseStopped)
	if err != nil {
		return l.errorf("release", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		tx.Rollback()
		return l.wrongState(ctx, "release", capture.LeaseHeld+" or "+capture.LeaseStopped)
	}
	if err := s.profileEvent(ctx, tx, l.runID, l.target, s.id, "released", ""); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return l.errorf("release", err)
	}
	l.end()
	s.log.Info("Released a profile lease.", zap.String("run", l.runID), zap.String("step", l.step), zap.String("target", l.target))
	return nil
}

// write runs one guarded UPDATE and records the event named what.
func (l *profileLease) write(ctx context.Context, what, q string, args ...any) error {
	s := l.s
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return l.errorf(what, err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, s.dialect.sql(q), args...)
	if err != nil {
		return l.errorf(what, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		tx.Rollback()
		return l.wrongState(ctx, what, "")
	}
	detail := ""
	if what == capture.LeaseStopFailed {
		detail, _ = args[1].(string)
	}
	if err := s.profileEvent(ctx, tx, l.runID, l.target, s.id, what, detail); err != nil {
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
	var state string
	err := l.s.db.QueryRowContext(ctx, `SELECT state FROM autocapture_profile_leases WHERE target = $1 AND token = $2`,
		l.target, l.token).Scan(&state)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		l.end()
		return fmt.Errorf("runner: profile %s: %s: %w", l.target, what, ErrProfileLeaseLost)
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
