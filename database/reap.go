package database

import (
	"context"
	"fmt"
	"time"

	"github.com/autocapture/autocapture/vocab"
)

// Abandon is one way a run is abandoned (see the runner's reaper).
type Abandon int

const (
	// Expired: an owner held the run and stopped heartbeating.
	Expired Abandon = iota
	// Stranded: the run is queued and nobody holds it, yet no River job of
	// its generation will ever start it.
	Stranded
)

// liveJobStates are River job states that will still run the job, or (running)
// are running it now, if attempted within lease_timeout.
const liveJobStates = `('available', 'pending', 'retryable', 'scheduled', 'running')`

// abandoned returns the SQL condition on autocapture_runs (beside finished_at
// IS NULL) under which a run is abandoned in kind k, with its arguments,
// numbered from $first: lease is runs.lease_timeout, queued the queued
// status. Leases and queued_at are on the database's clock ({now}), never
// a process's: see NowMS.
func (r Runs) abandoned(k Abandon, first int, lease time.Duration, queued vocab.Status) (string, []any) {
	if k == Expired {
		return `owner IS NOT NULL AND lease_until < {now}`, nil
	}
	// River stamps attempted_at with the database's clock, in its own format.
	fresh := fmt.Sprintf(`datetime('now', 'subsec', $%d)`, first+2)
	var leaseArg any = fmt.Sprintf("-%.3f seconds", lease.Seconds())
	if r.d == Postgres {
		fresh = fmt.Sprintf(`statement_timestamp() - make_interval(secs => $%d)`, first+2)
		leaseArg = lease.Seconds()
	}
	// The run's job of its current generation is river_job_id (enqueue writes
	// both in one transaction): one primary-key lookup per queued run.
	// A run a worker unclaimed within lease_timeout (no playbook slot) has a
	// job whose snooze River may not have written yet (migration 014).
	cond := fmt.Sprintf(`owner IS NULL AND status = $%d AND queued_at < {now} - $%d
		AND (unclaimed_at IS NULL OR unclaimed_at < {now} - $%[2]d) AND NOT EXISTS (
		SELECT 1 FROM river_job j WHERE j.id = autocapture_runs.river_job_id AND j.state IN %s
		AND (j.state <> 'running' OR j.attempted_at >= %s))`,
		first, first+1, liveJobStates, fresh)
	return cond, []any{string(queued), lease.Milliseconds(), leaseArg}
}

// ReapQuery selects up to 100 runs abandoned in kind k: every reaper tick on
// every replica runs it, so it reads an index (see migration 4).
func (r Runs) ReapQuery(k Abandon, lease time.Duration, queued vocab.Status) (string, []any) {
	cond, args := r.abandoned(k, 1, lease, queued)
	return r.d.SQL(`SELECT id, generation, COALESCE(owner, '') FROM autocapture_runs
		WHERE finished_at IS NULL AND ` + cond + ` LIMIT 100`), args
}

// Abandoned is a run abandoned: its id, generation, and the owner whose
// lease expired ("" for a stranded run).
type Abandoned struct {
	ID         string
	Generation int
	Owner      string
}

// Abandoned lists up to 100 runs abandoned in kind k (ReapQuery).
func (r Runs) Abandoned(ctx context.Context, q RowsQuerier, k Abandon, lease time.Duration, queued vocab.Status) ([]Abandoned, error) {
	query, args := r.ReapQuery(k, lease, queued)
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Abandoned
	for rows.Next() {
		var c Abandoned
		if err := rows.Scan(&c.ID, &c.Generation, &c.Owner); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// Resume moves run c back to the queue (status queued) under a new
// generation if it is still abandoned in kind k and held by c.Owner (both
// re-checked in the update), and returns its count of resumes;
// sql.ErrNoRows when it is not (another process won or is taking it, the
// owner renewed, or the job started it).
//
// A run another replica's reaper is taking (its row locked) is skipped,
// not waited for: every replica scans the same candidates, and waiting,
// they would take a dead replica's runs one at a time behind each other's
// transactions.
func (r Runs) Resume(ctx context.Context, q RowQuerier, k Abandon, lease time.Duration, queued vocab.Status, c Abandoned) (int, error) {
	cond, args := r.abandoned(k, 5, lease, queued)
	var resumed int
	err := q.QueryRowContext(ctx, r.d.SQL(`UPDATE autocapture_runs SET generation = generation + 1,
		resumed = resumed + 1, owner = NULL, lease_until = NULL, status = $1, queued_at = {now}
		WHERE `+r.d.UnlockedRuns(`id = $2 AND generation = $3 AND COALESCE(owner, '') = $4 AND finished_at IS NULL AND `+cond)+`
		RETURNING resumed`), append([]any{string(queued), c.ID, c.Generation, c.Owner}, args...)...).Scan(&resumed)
	return resumed, err
}
