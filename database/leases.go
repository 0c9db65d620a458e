package database

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/autocapture/autocapture/vocab"
)

// QClaim takes a run (see Runs.Claim) and answers how long ago it first
// started, on the database's clock. {now} is the dialect's (Dialect.SQL).
const QClaim = `UPDATE autocapture_runs SET owner = $1, lease_until = {now} + $2,
		attempts = attempts + 1, status = $3, started_at = COALESCE(started_at, {now})
		WHERE id = $4 AND generation = $5 AND finished_at IS NULL AND owner IS NULL
		RETURNING {now} - started_at`

// Claim takes run id for owner with a lease of leaseMS and status: only a
// run nobody holds (owner NULL), not finished, whose generation is
// generation. It counts an attempt and returns how long ago (ms, the
// database's clock) the run first started; sql.ErrNoRows when it is not
// such a run.
func (r Runs) Claim(ctx context.Context, q RowQuerier, owner string, leaseMS int64, status vocab.Status, id string, generation int) (int64, error) {
	var elapsed int64
	err := q.QueryRowContext(ctx, r.d.SQL(QClaim), owner, leaseMS, string(status), id, generation).Scan(&elapsed)
	return elapsed, err
}

// RunFlags are a renewed run's flags: a cancel was asked, its alert resolved.
type RunFlags struct{ Cancel, Resolved bool }

// marks returns "$first, $first+1, …" for n parameters.
func marks(first, n int) string {
	m := make([]string, n)
	for i := range m {
		m[i] = fmt.Sprintf("$%d", first+i)
	}
	return strings.Join(m, ", ")
}

// Renew renews, in one statement, owner's leases on runs ids for leaseMS
// from now (the database's clock) and returns the flags of the rows it
// renewed, by id. On PostgreSQL it skips rows another transaction holds
// locked (UnlockedRuns): a run missing from the answer was skipped or lost.
func (r Runs) Renew(ctx context.Context, q RowsQuerier, owner string, leaseMS int64, ids []string) (map[string]RunFlags, error) {
	args := []any{leaseMS, owner}
	for _, id := range ids {
		args = append(args, id)
	}
	rows, err := q.QueryContext(ctx, r.d.SQL(`UPDATE autocapture_runs SET lease_until = {now} + $1
		WHERE `+r.d.UnlockedRuns(`owner = $2 AND id IN (`+marks(3, len(ids))+`)`)+` RETURNING id, cancel_requested_at, resolved_at`), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]RunFlags{}
	for rows.Next() {
		var id string
		var cancelReq, resolved sql.NullInt64
		if err := rows.Scan(&id, &cancelReq, &resolved); err != nil {
			return nil, err
		}
		out[id] = RunFlags{Cancel: cancelReq.Valid, Resolved: resolved.Valid}
	}
	return out, rows.Err()
}

// Owned reads, without waiting for locks, which of runs ids owner owns.
func (r Runs) Owned(ctx context.Context, q RowsQuerier, owner string, ids []string) (map[string]bool, error) {
	args := []any{owner}
	for _, id := range ids {
		args = append(args, id)
	}
	return idSet(ctx, q, r.d.SQL(`SELECT id FROM autocapture_runs WHERE owner = $1 AND id IN (`+marks(2, len(ids))+`)`), args...)
}

// Release lets owner's lease on unfinished run id expire now, so a reaper
// resumes it at once; giveBack returns the attempt it counted (an
// interruption, not a failure).
func (Runs) Release(ctx context.Context, q Querier, id, owner string, giveBack bool) error {
	query := `UPDATE autocapture_runs SET lease_until = 0 WHERE id = $1 AND owner = $2 AND finished_at IS NULL`
	if giveBack {
		query = `UPDATE autocapture_runs SET lease_until = 0,
		attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END
		WHERE id = $1 AND owner = $2 AND finished_at IS NULL`
	}
	_, err := q.ExecContext(ctx, query, id, owner)
	return err
}

// PumpLease names a delivery lease: the thread's run and the lease's owner.
type PumpLease struct{ RunID, Owner string }

// RenewPumps renews, in one statement, the delivery leases of pumps for
// leaseMS from now and returns the owners whose lease it renewed. By the
// primary key's run_id; pump_owner names one thread (a job's).
func (t Threads) RenewPumps(ctx context.Context, q RowsQuerier, leaseMS int64, pumps []PumpLease) (map[string]bool, error) {
	args := []any{leaseMS}
	runs, owners := make([]string, len(pumps)), make([]string, len(pumps))
	for i, p := range pumps {
		args = append(args, p.RunID, p.Owner)
		runs[i], owners[i] = fmt.Sprintf("$%d", len(args)-1), fmt.Sprintf("$%d", len(args))
	}
	return idSet(ctx, q, t.d.SQL(`UPDATE autocapture_threads SET pump_until = {now} + $1
		WHERE run_id IN (`+strings.Join(runs, ", ")+`) AND pump_owner IN (`+strings.Join(owners, ", ")+`)
		RETURNING pump_owner`), args...)
}

// idSet runs query (one text column) and returns the values it read.
func idSet(ctx context.Context, q RowsQuerier, query string, args ...any) (map[string]bool, error) {
	ids, err := records(ctx, q, query, args...)
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out, nil
}
