package database

import (
	"context"
	"database/sql"
)

// Threads is autocapture_threads: each run's thread per sink (its address
// once the parent is delivered, JSON) and the delivery lease of the replica
// pumping it (pump_owner, pump_until on the database's clock).
type Threads struct{ d Dialect }

// ThreadRef names a run's thread on one sink.
type ThreadRef struct{ RunID, Sink string }

// Open adds the run's thread on sink unless it is there.
func (Threads) Open(ctx context.Context, q Querier, runID, sink string) error {
	_, err := q.ExecContext(ctx, `INSERT INTO autocapture_threads (run_id, sink) VALUES ($1, $2)
				ON CONFLICT DO NOTHING`, runID, sink)
	return err
}

// Sinks lists the sinks the run's threads are open on, by name.
func (Threads) Sinks(ctx context.Context, q RowsQuerier, runID string) ([]string, error) {
	return records(ctx, q, `SELECT sink FROM autocapture_threads WHERE run_id = $1 ORDER BY sink`, runID)
}

// SetAddress saves the thread's address (JSON).
func (Threads) SetAddress(ctx context.Context, q Querier, runID, sink, address string) error {
	_, err := q.ExecContext(ctx, `UPDATE autocapture_threads SET thread = $1 WHERE run_id = $2 AND sink = $3`,
		address, runID, sink)
	return err
}

// Address reads the thread's address (not Valid: not delivered yet;
// sql.ErrNoRows: no such thread).
func (Threads) Address(ctx context.Context, q RowQuerier, runID, sink string) (sql.NullString, error) {
	var raw sql.NullString
	err := q.QueryRowContext(ctx, `SELECT thread FROM autocapture_threads WHERE run_id = $1 AND sink = $2`,
		runID, sink).Scan(&raw)
	return raw, err
}

// TakePump takes the thread's delivery lease for owner for leaseMS, on the
// database's clock; false when another live deliverer holds it (or the
// thread is gone).
func (t Threads) TakePump(ctx context.Context, q Querier, runID, sink, owner string, leaseMS int64) (bool, error) {
	res, err := q.ExecContext(ctx, t.d.SQL(`UPDATE autocapture_threads SET pump_owner = $1,
		pump_until = {now} + $2 WHERE run_id = $3 AND sink = $4
		AND (pump_owner IS NULL OR pump_owner = $1 OR pump_until < {now})`),
		owner, leaseMS, runID, sink)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// HoldPump extends owner's lease to forMS past now; false when owner does
// not hold it (or the count of rows written could not be read).
func (t Threads) HoldPump(ctx context.Context, q Querier, runID, sink, owner string, forMS int64) (bool, error) {
	res, err := q.ExecContext(ctx, t.d.SQL(`UPDATE autocapture_threads SET pump_until = {now} + $1
		WHERE run_id = $2 AND sink = $3 AND pump_owner = $4`), forMS, runID, sink, owner)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return err == nil && n > 0, nil
}

// ReleasePump gives owner's lease on the thread back.
func (Threads) ReleasePump(ctx context.Context, q Querier, runID, sink, owner string) error {
	_, err := q.ExecContext(ctx, `UPDATE autocapture_threads SET pump_owner = NULL, pump_until = NULL
		WHERE run_id = $1 AND sink = $2 AND pump_owner = $3`, runID, sink, owner)
	return err
}

// ReservePump reserves the thread whose lease has lapsed (or that none
// holds) for leaseMS without an owner, for a delivery job the caller
// enqueues; false when it was taken since it was read.
func (t Threads) ReservePump(ctx context.Context, q Querier, runID, sink string, leaseMS int64) (bool, error) {
	res, err := q.ExecContext(ctx, t.d.SQL(`UPDATE autocapture_threads SET pump_owner = NULL, pump_until = {now} + $1
			WHERE run_id = $2 AND sink = $3 AND (pump_until IS NULL OR pump_until < {now})`), leaseMS, runID, sink)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return err == nil && n == 1, nil
}
