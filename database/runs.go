package database

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/autocapture/autocapture/internal/untrusted"
	"github.com/autocapture/autocapture/vocab"
)

// Runs is autocapture_runs, a row per alert run.
type Runs struct{ d Dialect }

// Run is a run's row as stored (runColumns): times in Unix ms, the alert,
// plans and verdict as JSON.
type Run struct {
	ID, Key, Fingerprint, Alertname string
	Alert                           string // JSON
	StartsAt                        int64
	Status                          vocab.Status
	Reason                          string
	ResolvedAt, CancelRequestedAt   sql.NullInt64
	CreatedAt                       int64
	StartedAt, FinishedAt           sql.NullInt64
	Attempts, Resumed, Generation   int
	Owner                           sql.NullString
	LeaseUntil                      sql.NullInt64
	Plans                           sql.NullString // JSON
	WindowStart, WindowEnd          sql.NullInt64
	Thread                          sql.NullString // before the outbox (migration 5); unused
	Verdict                         sql.NullString // JSON
	ManifestKey                     sql.NullString
}

const runColumns = `id, run_key, fingerprint, alertname, alert, starts_at, status, reason, resolved_at,
	cancel_requested_at, created_at, started_at, finished_at, attempts, resumed, generation, owner,
	lease_until, plans, window_start, window_end, thread, verdict, manifest_key`

// Scanner reads one row: *sql.Row or *sql.Rows.
type Scanner interface{ Scan(dest ...any) error }

// scanRun reads one row selected with runColumns.
func scanRun(sc Scanner) (Run, error) {
	var r Run
	err := sc.Scan(&r.ID, &r.Key, &r.Fingerprint, &r.Alertname, &r.Alert, &r.StartsAt, &r.Status, &r.Reason,
		&r.ResolvedAt, &r.CancelRequestedAt, &r.CreatedAt, &r.StartedAt, &r.FinishedAt, &r.Attempts, &r.Resumed, &r.Generation,
		&r.Owner, &r.LeaseUntil, &r.Plans, &r.WindowStart, &r.WindowEnd, &r.Thread, &r.Verdict, &r.ManifestKey)
	return r, err
}

// scanRuns reads every row of rows, selected with runColumns, and closes them.
func scanRuns(rows *sql.Rows, err error) ([]Run, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Run
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// Get reads run id (sql.ErrNoRows: no such run).
func (Runs) Get(ctx context.Context, q RowQuerier, id string) (Run, error) {
	return scanRun(q.QueryRowContext(ctx, `SELECT `+runColumns+` FROM autocapture_runs WHERE id = $1`, id))
}

// GroupMembers reads the runs of the group lead leads, in the order they
// joined.
func (Runs) GroupMembers(ctx context.Context, q RowsQuerier, lead string) ([]Run, error) {
	return scanRuns(q.QueryContext(ctx, `SELECT `+runColumns+` FROM autocapture_runs WHERE group_lead = $1
		ORDER BY created_at, id`, lead))
}

// RunFilter selects runs for a listing, newest first: by alertname and
// status when set, after the cursor (CreatedAt, ID) when AfterID is set, at
// most Limit rows.
type RunFilter struct {
	Alertname      string
	Status         vocab.Status
	AfterCreatedAt int64
	AfterID        string
	Limit          int
}

// ListQuery is List's statement and arguments for f: each filter is served
// by an index (see migration 4).
func ListQuery(f RunFilter) (string, []any) {
	where := []string{"1 = 1"}
	var args []any
	arg := func(v any) string { args = append(args, v); return "$" + strconv.Itoa(len(args)) }
	if f.Alertname != "" {
		where = append(where, "alertname = "+arg(f.Alertname))
	}
	if f.Status != "" {
		where = append(where, "status = "+arg(string(f.Status)))
	}
	if f.AfterID != "" {
		c, i := arg(f.AfterCreatedAt), arg(f.AfterID)
		where = append(where, fmt.Sprintf("(created_at < %s OR (created_at = %s AND id < %s))", c, c, i))
	}
	query := `SELECT ` + runColumns + ` FROM autocapture_runs WHERE ` + strings.Join(where, " AND ") +
		` ORDER BY created_at DESC, id DESC LIMIT ` + arg(f.Limit)
	return query, args
}

// List reads the runs f selects, newest first.
func (Runs) List(ctx context.Context, q RowsQuerier, f RunFilter) ([]Run, error) {
	query, args := ListQuery(f)
	return scanRuns(q.QueryContext(ctx, query, args...))
}

// RequestCancel asks run id to stop (the first request's time is kept);
// false when it has finished (or does not exist).
func (r Runs) RequestCancel(ctx context.Context, q Querier, id string) (bool, error) {
	res, err := q.ExecContext(ctx, r.d.SQL(`UPDATE autocapture_runs SET cancel_requested_at = COALESCE(cancel_requested_at, {now})
		WHERE id = $1 AND finished_at IS NULL`), id)
	if err != nil {
		return false, err
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

// EndUnstarted ends run id with status and reason if nobody holds it and it
// has no thread yet (a run with a thread is ended by its next claim, which
// also closes the thread).
func (r Runs) EndUnstarted(ctx context.Context, q Querier, id string, status vocab.Status, reason string) error {
	_, err := q.ExecContext(ctx, r.d.SQL(`UPDATE autocapture_runs SET status = $1, reason = $2, finished_at = {now}
		WHERE id = $3 AND finished_at IS NULL AND owner IS NULL
		AND NOT EXISTS (SELECT 1 FROM autocapture_threads t WHERE t.run_id = autocapture_runs.id)`),
		string(status), reason, id)
	return err
}

// Exists says whether run id is in the store.
func (Runs) Exists(ctx context.Context, q RowQuerier, id string) (bool, error) {
	var one int
	err := q.QueryRowContext(ctx, `SELECT 1 FROM autocapture_runs WHERE id = $1`, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// LockOwned locks run id's row inside q's transaction if owner holds its
// lease (a no-op UPDATE: the row lock is what it is for), so what the
// caller writes next for the run cannot race another writer of it; false
// when owner no longer holds the run (nothing locked).
func (Runs) LockOwned(ctx context.Context, q Querier, id, owner string) (bool, error) {
	res, err := q.ExecContext(ctx, `UPDATE autocapture_runs SET lease_until = lease_until WHERE id = $1 AND owner = $2`, id, owner)
	if err != nil {
		return false, err
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

// SetVerdict makes verdict (JSON) run id's current verdict.
func (Runs) SetVerdict(ctx context.Context, q Querier, id, verdict string) error {
	_, err := q.ExecContext(ctx, `UPDATE autocapture_runs SET verdict = $1 WHERE id = $2`, verdict, id)
	return err
}

// Lock locks run id's row inside q's transaction (a no-op UPDATE), whoever
// holds its lease: writers of the run's rows that must see each other's
// work (the last of its uploads) take it first.
func (Runs) Lock(ctx context.Context, q Querier, id string) error {
	_, err := q.ExecContext(ctx, `UPDATE autocapture_runs SET outbox_seq = outbox_seq WHERE id = $1`, id)
	return err
}

// FinishedAt is when run id finished (Unix ms; not Valid: it has not);
// sql.ErrNoRows for no such run.
func (Runs) FinishedAt(ctx context.Context, q RowQuerier, id string) (sql.NullInt64, error) {
	var finishedAt sql.NullInt64
	err := q.QueryRowContext(ctx, `SELECT finished_at FROM autocapture_runs WHERE id = $1`, id).Scan(&finishedAt)
	return finishedAt, err
}

// QPlaybookSlot counts the runs holding a slot of playbook $1, beside run $2.
// It reads the runs in flight, not the playbook's history: an owned run always
// has a lease_until (claim sets both, finish, unclaim and the reaper clear
// both), which lets the unfinished runs' lease index (runs_lease) serve it.
const QPlaybookSlot = `SELECT COUNT(*) FROM autocapture_runs r
		WHERE r.finished_at IS NULL AND r.lease_until IS NOT NULL AND r.owner IS NOT NULL
		AND r.slot_generation = r.generation AND r.id <> $2
		AND EXISTS (SELECT 1 FROM autocapture_run_playbooks rp WHERE rp.run_id = r.id AND rp.playbook = $1)`

// PlaybookSlots counts the runs holding a slot of playbook (QPlaybookSlot),
// beside run runID.
func (Runs) PlaybookSlots(ctx context.Context, q RowQuerier, playbook, runID string) (int, error) {
	var n int
	err := q.QueryRowContext(ctx, QPlaybookSlot, playbook, runID).Scan(&n)
	return n, err
}

// HoldSlots marks run id, while owner owns it, as holding its playbooks'
// slots in its current generation; false when owner does not own it.
func (Runs) HoldSlots(ctx context.Context, q Querier, id, owner string) (bool, error) {
	res, err := q.ExecContext(ctx, `UPDATE autocapture_runs SET slot_generation = generation
		WHERE id = $1 AND owner = $2`, id, owner)
	if err != nil {
		return false, err
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

// LockPlaybook serializes max_concurrent checks of playbook on PostgreSQL
// for the rest of q's transaction (SQLite's write transactions are serial
// already: nothing to do).
func (r Runs) LockPlaybook(ctx context.Context, q Querier, playbook string) error {
	if r.d != Postgres {
		return nil
	}
	h := fnv.New64a()
	h.Write([]byte("autocapture/playbook/" + playbook))
	_, err := q.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(h.Sum64()))
	return err
}

// NextOutboxSeq numbers the run's next thread operation (its outbox
// counter, bumped under the run row's lock).
func (Runs) NextOutboxSeq(ctx context.Context, q RowQuerier, id string) (int, error) {
	var seq int
	err := q.QueryRowContext(ctx, `UPDATE autocapture_runs SET outbox_seq = outbox_seq + 1 WHERE id = $1 RETURNING outbox_seq`, id).Scan(&seq)
	return seq, err
}

// CountByStatus counts the runs by status.
func (Runs) CountByStatus(ctx context.Context, q RowsQuerier) (map[vocab.Status]int, error) {
	rows, err := q.QueryContext(ctx, `SELECT status, COUNT(*) FROM autocapture_runs GROUP BY status`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[vocab.Status]int{}
	for rows.Next() {
		var status string
		var n int
		if err := rows.Scan(&status, &n); err != nil {
			return out, err
		}
		out[vocab.Status(status)] = n
	}
	return out, rows.Err()
}

// OldestWait is how long (ms, on the database's clock: queued_at is on it
// too) the oldest run of status has waited since it was queued; not Valid
// without one.
func (r Runs) OldestWait(ctx context.Context, q RowQuerier, status vocab.Status) (sql.NullInt64, error) {
	var waitedMS sql.NullInt64
	err := q.QueryRowContext(ctx, r.d.SQL(`SELECT {now} - MIN(queued_at) FROM autocapture_runs WHERE status = $1`),
		string(status)).Scan(&waitedMS)
	return waitedMS, err
}

// FailOwned ends run id, while owner owns it, with status (a failure) and
// reason, and lets its lease go.
func (r Runs) FailOwned(ctx context.Context, q Querier, id, owner string, status vocab.Status, reason string) error {
	_, err := q.ExecContext(ctx, r.d.SQL(`UPDATE autocapture_runs
		SET status = $1, reason = $2, finished_at = {now}, owner = NULL, lease_until = NULL
		WHERE id = $3 AND owner = $4`), string(status), reason, id, owner)
	return err
}

// BumpManifest asks for run id's manifest to be (re)written: its
// manifest_seq moves, so a writer knows what it wrote is stale.
func (Runs) BumpManifest(ctx context.Context, q Querier, id string) error {
	_, err := q.ExecContext(ctx, `UPDATE autocapture_runs SET manifest_seq = manifest_seq + 1 WHERE id = $1`, id)
	return err
}

// ManifestSeq reads run id's manifest_seq (sql.ErrNoRows: no such run).
func (Runs) ManifestSeq(ctx context.Context, q RowQuerier, id string) (int64, error) {
	var seq int64
	err := q.QueryRowContext(ctx, `SELECT manifest_seq FROM autocapture_runs WHERE id = $1`, id).Scan(&seq)
	return seq, err
}

// SetManifest records the key of run id's manifest and returns its
// manifest_seq as it is now (sql.ErrNoRows: no such run).
func (Runs) SetManifest(ctx context.Context, q RowQuerier, id, key string) (int64, error) {
	var seq int64
	err := q.QueryRowContext(ctx, `UPDATE autocapture_runs SET manifest_key = $1 WHERE id = $2 RETURNING manifest_seq`,
		key, id).Scan(&seq)
	return seq, err
}

// Finish ends run id, while owner owns it, with status and reason (and
// verdict, JSON, when Valid: else the latest recorded stays), letting its
// lease go. It returns how long the run took since its first start (ms, on
// the database's clock); sql.ErrNoRows when owner no longer owns it.
func (r Runs) Finish(ctx context.Context, q RowQuerier, id, owner string, status vocab.Status, reason string, verdict sql.NullString) (int64, error) {
	var tookMS int64
	err := q.QueryRowContext(ctx, r.d.SQL(`UPDATE autocapture_runs SET status = $1, reason = $2,
		finished_at = {now}, verdict = COALESCE($3, verdict), owner = NULL, lease_until = NULL WHERE id = $4 AND owner = $5
		RETURNING finished_at - COALESCE(started_at, created_at)`),
		string(status), reason, verdict, id, owner).Scan(&tookMS)
	return tookMS, err
}

// Unclaim hands run id, while owner owns it, back to the queue with status
// without counting the attempt, and stamps unclaimed_at (the database's
// clock) so the reaper does not take it for stranded while River records the
// job's snooze (migration 014).
func (r Runs) Unclaim(ctx context.Context, q Querier, id, owner string, status vocab.Status) error {
	_, err := q.ExecContext(ctx, r.d.SQL(`UPDATE autocapture_runs SET owner = NULL, lease_until = NULL, status = $1,
		attempts = attempts - 1, unclaimed_at = {now} WHERE id = $2 AND owner = $3`), string(status), id, owner)
	return err
}

// StorePlans stores, while owner owns run id, the plans it runs (JSON) and
// its capture window (Unix ms), and marks it as holding its playbooks'
// slots; false when owner does not own it.
func (Runs) StorePlans(ctx context.Context, q Querier, id, owner, plans string, windowStart, windowEnd int64) (bool, error) {
	res, err := q.ExecContext(ctx, `UPDATE autocapture_runs SET plans = $1, window_start = $2, window_end = $3,
		slot_generation = generation WHERE id = $4 AND owner = $5`, plans, windowStart, windowEnd, id, owner)
	if err != nil {
		return false, err
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

// AddPlaybook records that run id runs playbook (autocapture_run_playbooks,
// for max_concurrent), with the cooldown key it held.
func (Runs) AddPlaybook(ctx context.Context, q Querier, id, playbook, cooldownKey string, createdAt int64) error {
	_, err := q.ExecContext(ctx, `INSERT INTO autocapture_run_playbooks (run_id, playbook, cooldown_key, created_at)
			VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`, id, playbook, untrusted.Key(cooldownKey), createdAt)
	return err
}

// NewRun is a run to insert, queued.
type NewRun struct {
	ID, Key, Fingerprint, Alertname string
	Alert                           string // JSON
	StartsAt                        int64
	Status                          vocab.Status
	CreatedAt, QueuedAt             int64
	// Instance and Model are the alert's instance and model_name labels
	// (clipped as Alertname is), for the seen-before query (seen.go).
	Instance, Model string
}

// InsertedRun is a run Insert wrote: its id and run key.
type InsertedRun struct{ ID, Key string }

// Insert inserts runs in one statement (callers bound the rows: 11
// parameters each). The database decides races: the run key is unique, and
// so is the fingerprint among unresolved runs; a row that conflicts is not
// inserted, and only those written are returned.
func (Runs) Insert(ctx context.Context, q RowsQuerier, runs []NewRun) ([]InsertedRun, error) {
	var b strings.Builder
	b.WriteString(`INSERT INTO autocapture_runs
		(id, run_key, fingerprint, alertname, alert, starts_at, status, created_at, queued_at, instance, model_name) VALUES `)
	args := make([]any, 0, 11*len(runs))
	for n, r := range runs {
		if n > 0 {
			b.WriteString(", ")
		}
		o := 11 * n
		fmt.Fprintf(&b, "($%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d)", o+1, o+2, o+3, o+4, o+5, o+6, o+7, o+8, o+9, o+10, o+11)
		args = append(args, r.ID, r.Key, r.Fingerprint, r.Alertname, r.Alert, r.StartsAt, string(r.Status), r.CreatedAt, r.QueuedAt,
			r.Instance, r.Model)
	}
	b.WriteString(" ON CONFLICT DO NOTHING RETURNING id, run_key")
	rows, err := q.QueryContext(ctx, b.String(), args...)
	if err != nil {
		return nil, err
	}
	var out []InsertedRun
	for rows.Next() {
		var r InsertedRun
		if err := rows.Scan(&r.ID, &r.Key); err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, r)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, err
	}
	return out, nil
}

// ResolveStale marks run id resolved at atMS if it is unresolved and had
// finished before then (its resolution was lost); false when it is no
// such run.
func (Runs) ResolveStale(ctx context.Context, q Querier, id string, atMS int64) (bool, error) {
	res, err := q.ExecContext(ctx, `UPDATE autocapture_runs SET resolved_at = $1
		WHERE id = $2 AND resolved_at IS NULL AND finished_at IS NOT NULL AND finished_at < $1`,
		atMS, id)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return err == nil && n == 1, err
}

// Unresolved is the id of fingerprint's unresolved run (sql.ErrNoRows: none).
func (Runs) Unresolved(ctx context.Context, q RowQuerier, fingerprint string) (string, error) {
	var id string
	err := q.QueryRowContext(ctx, `SELECT id FROM autocapture_runs WHERE fingerprint = $1 AND resolved_at IS NULL`,
		fingerprint).Scan(&id)
	return id, err
}

// ByKey is the id of the run of episode key (sql.ErrNoRows: none).
func (Runs) ByKey(ctx context.Context, q RowQuerier, key string) (string, error) {
	var id string
	err := q.QueryRowContext(ctx, `SELECT id FROM autocapture_runs WHERE run_key = $1`, key).Scan(&id)
	return id, err
}

// Resolve marks fingerprint's unresolved run resolved at atMS and returns
// its id (sql.ErrNoRows: none).
func (Runs) Resolve(ctx context.Context, q RowQuerier, fingerprint string, atMS int64) (string, error) {
	var id string
	err := q.QueryRowContext(ctx, `UPDATE autocapture_runs SET resolved_at = $1
		WHERE fingerprint = $2 AND resolved_at IS NULL RETURNING id`, atMS, fingerprint).Scan(&id)
	return id, err
}

// QResolvedRun finds the run a repeated resolution belongs to: its episode's,
// else the fingerprint's newest resolved since the episode started.
const QResolvedRun = `SELECT id FROM autocapture_runs WHERE run_key = $1
		OR (fingerprint = $2 AND resolved_at >= $3) ORDER BY created_at DESC LIMIT 1`

// ResolvedRun is the run a repeated resolution of episode key belongs to
// (QResolvedRun; sql.ErrNoRows: none).
func (Runs) ResolvedRun(ctx context.Context, q RowQuerier, key, fingerprint string, startsAt int64) (string, error) {
	var id string
	err := q.QueryRowContext(ctx, QResolvedRun, key, fingerprint, startsAt).Scan(&id)
	return id, err
}

// SetJobIDs records, in one statement, each run's River job (jobIDs[i] is
// runIDs[i]'s); callers bound the runs (2 parameters each).
func (Runs) SetJobIDs(ctx context.Context, q Querier, runIDs []string, jobIDs []int64) error {
	var b strings.Builder
	b.WriteString(`UPDATE autocapture_runs SET river_job_id = CASE id`)
	args := make([]any, 0, 2*len(runIDs))
	in := make([]string, len(runIDs))
	for i := range runIDs {
		fmt.Fprintf(&b, " WHEN $%d THEN CAST($%d AS BIGINT)", 2*i+1, 2*i+2)
		in[i] = fmt.Sprintf("$%d", 2*i+1)
		args = append(args, runIDs[i], jobIDs[i])
	}
	b.WriteString(" END WHERE id IN (" + strings.Join(in, ", ") + ")")
	_, err := q.ExecContext(ctx, b.String(), args...)
	return err
}

// QueueState reads whether run id is owned (and by whom), whether it has
// finished, and how long (ms, the database's clock) it has been queued.
func (r Runs) QueueState(ctx context.Context, q RowQuerier, id string) (owner sql.NullString, done bool, queuedForMS int64, err error) {
	err = q.QueryRowContext(ctx, r.d.SQL(`SELECT owner, finished_at IS NOT NULL,
				{now} - COALESCE(queued_at, {now}) FROM autocapture_runs WHERE id = $1`), id).Scan(&owner, &done, &queuedForMS)
	return owner, done, queuedForMS, err
}
