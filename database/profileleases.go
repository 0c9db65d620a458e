package database

import (
	"context"
	"database/sql"
)

// ProfileLeases is autocapture_profile_leases: one row per target while a
// capture holds it. Writes are guarded by the lease's token, so a process
// that lost it can change nothing; states are the capture package's
// (vocab.LeaseHeld …), passed in by the caller.
type ProfileLeases struct{ d Dialect }

// ProfileLease is a lease's row (times: Unix ms, the database's clock).
type ProfileLease struct {
	Target, RunID, Plan, Step, Owner, Token, State string
	Acquired, Until                                int64
	Since, Deadline, StopAt                        sql.NullInt64
	StopBy                                         string
	Attempts                                       int
	Saved                                          sql.NullString
	Reason                                         string
}

// leaseColumns are a lease row's columns, in scanLease's order.
const leaseColumns = `target, run_id, plan, step_id, owner, token, state, acquired_at, since, deadline,
	lease_until, stop_requested_at, stop_requested_by, stop_attempts, saved, reason`

func scanLease(sc Scanner) (ProfileLease, error) {
	var r ProfileLease
	err := sc.Scan(&r.Target, &r.RunID, &r.Plan, &r.Step, &r.Owner, &r.Token, &r.State, &r.Acquired,
		&r.Since, &r.Deadline, &r.Until, &r.StopAt, &r.StopBy, &r.Attempts, &r.Saved, &r.Reason)
	return r, err
}

func scanLeases(rows *sql.Rows, err error) ([]ProfileLease, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ProfileLease
	for rows.Next() {
		r, err := scanLease(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// affected says whether res wrote a row.
func affected(res sql.Result, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

// ProfileLockKey is the advisory lock Acquire takes on PostgreSQL.
const ProfileLockKey = 727010

// LockAcquire serializes the runner's Acquire for the rest of q's
// transaction on PostgreSQL (SQLite's write transactions are serial).
func (p ProfileLeases) LockAcquire(ctx context.Context, q Querier) error {
	if p.d != Postgres {
		return nil
	}
	_, err := q.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, ProfileLockKey)
	return err
}

// Get reads target's lease (sql.ErrNoRows: none).
func (ProfileLeases) Get(ctx context.Context, q RowQuerier, target string) (ProfileLease, error) {
	return scanLease(q.QueryRowContext(ctx, `SELECT `+leaseColumns+` FROM autocapture_profile_leases WHERE target = $1`, target))
}

// GetForUpdate reads target's lease and locks it in q's transaction on
// PostgreSQL (sql.ErrNoRows: none).
func (p ProfileLeases) GetForUpdate(ctx context.Context, q RowQuerier, target string) (ProfileLease, error) {
	return scanLease(q.QueryRowContext(ctx, `SELECT `+leaseColumns+` FROM autocapture_profile_leases WHERE target = $1`+p.d.ForUpdate(), target))
}

// LatestOfRun reads run runID's newest lease (sql.ErrNoRows: none).
func (ProfileLeases) LatestOfRun(ctx context.Context, q RowQuerier, runID string) (ProfileLease, error) {
	return scanLease(q.QueryRowContext(ctx, `SELECT `+leaseColumns+` FROM autocapture_profile_leases
		WHERE run_id = $1 ORDER BY acquired_at DESC LIMIT 1`, runID))
}

// List reads every lease, oldest first.
func (ProfileLeases) List(ctx context.Context, q RowsQuerier) ([]ProfileLease, error) {
	return scanLeases(q.QueryContext(ctx, `SELECT `+leaseColumns+` FROM autocapture_profile_leases ORDER BY acquired_at, target`))
}

// RequestStop flags a stop request by by on run runID's leases in states
// (the first request's time and author are kept) and returns those it
// flagged.
func (p ProfileLeases) RequestStop(ctx context.Context, q RowsQuerier, runID, by string, states [3]string) ([]ProfileLease, error) {
	return scanLeases(q.QueryContext(ctx, p.d.SQL(`UPDATE autocapture_profile_leases
		SET stop_requested_at = COALESCE(stop_requested_at, {now}),
		stop_requested_by = CASE WHEN stop_requested_at IS NULL THEN $1 ELSE stop_requested_by END
		WHERE run_id = $2 AND state IN ($3, $4, $5) RETURNING `+leaseColumns),
		by, runID, states[0], states[1], states[2]))
}

// Delete deletes target's lease if it still has token.
func (ProfileLeases) Delete(ctx context.Context, q Querier, target, token string) error {
	_, err := q.ExecContext(ctx, `DELETE FROM autocapture_profile_leases WHERE target = $1 AND token = $2`, target, token)
	return err
}

// DeleteInState deletes target's lease if it still has token and is in
// state; false when it did not.
func (ProfileLeases) DeleteInState(ctx context.Context, q Querier, target, token, state string) (bool, error) {
	return affected(q.ExecContext(ctx, `DELETE FROM autocapture_profile_leases WHERE target = $1 AND token = $2 AND state = $3`,
		target, token, state))
}

// DeleteInStates deletes target's lease if it still has token and is in
// state or state2; false when it did not.
func (ProfileLeases) DeleteInStates(ctx context.Context, q Querier, target, token, state, state2 string) (bool, error) {
	return affected(q.ExecContext(ctx, `DELETE FROM autocapture_profile_leases WHERE target = $1 AND token = $2 AND state IN ($3, $4)`,
		target, token, state, state2))
}

// Insert adds a lease (acquired at acquired, lasting until until).
func (ProfileLeases) Insert(ctx context.Context, q Querier, l ProfileLease) error {
	_, err := q.ExecContext(ctx, `INSERT INTO autocapture_profile_leases
		(target, run_id, plan, step_id, owner, token, state, acquired_at, lease_until)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`, l.Target, l.RunID, l.Plan, l.Step,
		l.Owner, l.Token, l.State, l.Acquired, l.Until)
	return err
}

// Resume gives target's lease, if it still has token, to owner under
// newToken until until; false when it moved.
func (ProfileLeases) Resume(ctx context.Context, q Querier, target, token, owner, newToken string, until int64) (bool, error) {
	return affected(q.ExecContext(ctx, `UPDATE autocapture_profile_leases SET owner = $1, token = $2,
		lease_until = $3 WHERE target = $4 AND token = $5`, owner, newToken, until, target, token))
}

// Active counts the leases that hold a target at now (every row but those
// in held or stopped whose lease lapsed, and the ownerless stopped ones)
// and, of those, the ones still held (not started).
func (ProfileLeases) Active(ctx context.Context, q RowQuerier, held, stopped string, now int64) (active, pending int, err error) {
	err = q.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(CASE WHEN state = $1 THEN 1 ELSE 0 END), 0)
		FROM autocapture_profile_leases WHERE NOT (state IN ($1, $2) AND lease_until < $3) AND NOT (state = $2 AND owner = '')`,
		held, stopped, now).Scan(&active, &pending)
	return active, pending, err
}

// CountByState counts the leases by state.
func (ProfileLeases) CountByState(ctx context.Context, q RowsQuerier) (map[string]float64, error) {
	rows, err := q.QueryContext(ctx, `SELECT state, COUNT(*) FROM autocapture_profile_leases GROUP BY state`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]float64{}
	for rows.Next() {
		var st string
		var n float64
		if rows.Scan(&st, &n) == nil {
			out[st] = n
		}
	}
	return out, nil
}

// PastDeadline counts the leases in state or state2 past their deadline.
func (p ProfileLeases) PastDeadline(ctx context.Context, q RowQuerier, state, state2 string) (float64, error) {
	var past float64
	err := q.QueryRowContext(ctx, p.d.SQL(`SELECT COUNT(*) FROM autocapture_profile_leases
		WHERE state IN ($1, $2) AND deadline < {now}`), state, state2).Scan(&past)
	return past, err
}

// StopRequest reads target's stop request if the lease still has token
// (sql.ErrNoRows: it does not).
func (ProfileLeases) StopRequest(ctx context.Context, q RowQuerier, target, token string) (at sql.NullInt64, by string, err error) {
	err = q.QueryRowContext(ctx, `SELECT stop_requested_at, stop_requested_by FROM autocapture_profile_leases
			WHERE target = $1 AND token = $2`, target, token).Scan(&at, &by)
	return at, by, err
}

// State reads the state of target's lease if it still has token
// (sql.ErrNoRows: it does not).
func (ProfileLeases) State(ctx context.Context, q RowQuerier, target, token string) (string, error) {
	var state string
	err := q.QueryRowContext(ctx, `SELECT state FROM autocapture_profile_leases WHERE target = $1 AND token = $2`,
		target, token).Scan(&state)
	return state, err
}

// Record makes the lease (target, token), if held (state from), recording
// (state to) from now for frameMS; its lease_until is the deadline plus
// graceMS. saved is what the step saved (JSON; not Valid: nothing). It
// returns since and deadline; sql.ErrNoRows when the lease is not so.
func (p ProfileLeases) Record(ctx context.Context, q RowQuerier, target, token, from, to string, frameMS, graceMS int64, saved sql.NullString) (since, deadline int64, err error) {
	err = q.QueryRowContext(ctx, p.d.SQL(`UPDATE autocapture_profile_leases SET state = $1, since = {now},
		deadline = {now} + $2, lease_until = {now} + $2 + $7, saved = $3 WHERE target = $4 AND token = $5 AND state = $6
		RETURNING since, deadline`),
		to, frameMS, saved, target, token, from, graceMS).Scan(&since, &deadline)
	return since, deadline, err
}

// greatest is the dialect's two-argument maximum.
func (d Dialect) greatest(a, b string) string {
	if d == Postgres {
		return "GREATEST(" + a + ", " + b + ")"
	}
	return "MAX(" + a + ", " + b + ")"
}

// Stopping moves the lease (target, token), if in one of from, to state
// to, lasting at least forMS from now; false when it is not so.
func (p ProfileLeases) Stopping(ctx context.Context, q Querier, target, token, to string, forMS int64, from [3]string) (bool, error) {
	return affected(q.ExecContext(ctx, p.d.SQL(`UPDATE autocapture_profile_leases SET state = $1, lease_until = `+p.d.greatest("lease_until", "{now} + $2")+
		` WHERE target = $3 AND token = $4 AND state IN ($5, $6, $7)`), to, forMS, target, token, from[0], from[1], from[2]))
}

// Stopped moves the lease (target, token), if in one of from, to state to,
// clearing its reason; false when it is not so.
func (p ProfileLeases) Stopped(ctx context.Context, q Querier, target, token, to string, from [3]string) (bool, error) {
	return affected(q.ExecContext(ctx, p.d.SQL(`UPDATE autocapture_profile_leases SET state = $1, reason = '' WHERE target = $2 AND token = $3 AND state IN ($4, $5, $6)`),
		to, target, token, from[0], from[1], from[2]))
}

// StopFailed hands the lease (target, token) to the sweeper in state to
// with reason: no owner, one more stop attempt, lapsed now; false when it
// has another token.
func (p ProfileLeases) StopFailed(ctx context.Context, q Querier, target, token, to, reason string) (bool, error) {
	return affected(q.ExecContext(ctx, p.d.SQL(`UPDATE autocapture_profile_leases SET state = $1, reason = $2, owner = '', token = '',
		stop_attempts = stop_attempts + 1, lease_until = {now} WHERE target = $3 AND token = $4`), to, reason, target, token))
}

// Renew extends the lease (target, token) by holdMS from now, but a
// lease in state recording never past its deadline + graceMS, and reads its
// stop request; sql.ErrNoRows when it has another token.
//
// A recording's lease never reaches past its deadline + stopGrace
// (see Record): renewing cannot keep a recording alive past it.
func (p ProfileLeases) Renew(ctx context.Context, q RowQuerier, target, token, recording string, holdMS, graceMS int64) (stopAt sql.NullInt64, stopBy string, err error) {
	err = q.QueryRowContext(ctx, p.d.SQL(`UPDATE autocapture_profile_leases SET lease_until =
		CASE WHEN state = $4 AND deadline IS NOT NULL AND deadline + $5 < {now} + $1 THEN deadline + $5 ELSE {now} + $1 END
		WHERE target = $2 AND token = $3 RETURNING stop_requested_at, stop_requested_by`),
		holdMS, target, token, recording, graceMS).Scan(&stopAt, &stopBy)
	return stopAt, stopBy, err
}

// Sweepable lists up to 100 leases whose owner is gone, by lease_until:
// lapsed and not recording or stopping (or past the deadline, or asked to
// stop), or stopped (state stopped), ownerless and of a finished run.
func (p ProfileLeases) Sweepable(ctx context.Context, q RowsQuerier, recording, stopping, stopped string) ([]ProfileLease, error) {
	return scanLeases(q.QueryContext(ctx, p.d.SQL(`SELECT `+leaseColumns+` FROM autocapture_profile_leases l
		WHERE (lease_until < {now} AND (state NOT IN ($1, $2) OR deadline < {now} OR stop_requested_at IS NOT NULL))
		OR (state = $3 AND owner = '' AND EXISTS (SELECT 1 FROM autocapture_runs r WHERE r.id = l.run_id AND r.finished_at IS NOT NULL))
		ORDER BY lease_until LIMIT 100`), recording, stopping, stopped))
}

// SweepRelease deletes the lease (target, token) if it lapsed, or if it is
// stopped (state stopped) with no owner; false when it did not.
//
// Guarded by the token as read (a resumed attempt that took the row back
// has its own) and a lapsed lease, or for a swept row by its having no
// owner yet (its run ended: selected for that).
func (p ProfileLeases) SweepRelease(ctx context.Context, q Querier, target, token, stopped string) (bool, error) {
	return affected(q.ExecContext(ctx, p.d.SQL(`DELETE FROM autocapture_profile_leases
		WHERE target = $1 AND token = $2 AND (lease_until < {now} OR (state = $3 AND owner = ''))`),
		target, token, stopped))
}

// SweepClaim claims the lapsed lease (target, token) for owner under
// newToken for claimMS, moving it from recording to stopping; false when
// its owner renewed it or another sweep claimed it.
func (p ProfileLeases) SweepClaim(ctx context.Context, q Querier, target, token, owner, newToken, recording, stopping string, claimMS int64) (bool, error) {
	return affected(q.ExecContext(ctx, p.d.SQL(`UPDATE autocapture_profile_leases SET owner = $1, token = $2,
		state = CASE WHEN state = $3 THEN $4 ELSE state END, lease_until = {now} + $5
		WHERE target = $6 AND token = $7 AND lease_until < {now}`),
		owner, newToken, recording, stopping, claimMS, target, token))
}

// SweptStopped leaves the lease (target, token) in state stopped with no
// owner and reason, lasting windowMS from now.
func (p ProfileLeases) SweptStopped(ctx context.Context, q Querier, target, token, stopped, reason string, windowMS int64) error {
	_, err := q.ExecContext(ctx, p.d.SQL(`UPDATE autocapture_profile_leases SET state = $1, owner = '', token = '',
			reason = $2, lease_until = {now} + $3 WHERE target = $4 AND token = $5`),
		stopped, reason, windowMS, target, token)
	return err
}

// SweptStopFailed leaves the lease (target, token) in state stopFailed with
// no owner, reason and attempts, retried backoffMS from now.
func (p ProfileLeases) SweptStopFailed(ctx context.Context, q Querier, target, token, stopFailed, reason string, attempts int, backoffMS int64) error {
	_, err := q.ExecContext(ctx, p.d.SQL(`UPDATE autocapture_profile_leases SET state = $1, reason = $2, owner = '',
			token = '', stop_attempts = $3, lease_until = {now} + $4 WHERE target = $5 AND token = $6`),
		stopFailed, reason, attempts, backoffMS, target, token)
	return err
}

// Lapse ends the lease (target, token) now.
func (p ProfileLeases) Lapse(ctx context.Context, q Querier, target, token string) error {
	_, err := q.ExecContext(ctx, p.d.SQL(`UPDATE autocapture_profile_leases SET lease_until = {now}
		WHERE target = $1 AND token = $2`), target, token)
	return err
}
