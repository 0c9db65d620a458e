package database

import (
	"context"
	"database/sql"
	"errors"
	"strings"
)

// Actions is autocapture_actions: what people did from a run's thread.
type Actions struct{ d Dialect }

// Action states.
const (
	ActionPending = "pending" // written, its call not yet known to be made
	ActionDone    = "done"
	ActionFailed  = "failed"  // the call failed: nothing was done
	ActionRefused = "refused" // the clicker may not: nothing was tried
)

// ActionRow is one action as stored; times are Unix ms, the database's clock.
type ActionRow struct {
	ID, RunID, Kind, Arg string
	UserID, UserName     string
	State                string
	Slot, SilenceID      sql.NullString
	EndsAt               sql.NullInt64
	Detail               string
	Attempt              int // times a failed action was taken again (Rearm)
	ClaimedUntil         int64
	CreatedAt            int64
	DoneAt               sql.NullInt64
}

const actionColumns = `id, run_id, kind, arg, user_id, user_name, state, slot, silence_id, ends_at, detail,
	attempt, claimed_until, created_at, done_at`

func scanAction(sc Scanner) (ActionRow, error) {
	var a ActionRow
	err := sc.Scan(&a.ID, &a.RunID, &a.Kind, &a.Arg, &a.UserID, &a.UserName, &a.State, &a.Slot, &a.SilenceID,
		&a.EndsAt, &a.Detail, &a.Attempt, &a.ClaimedUntil, &a.CreatedAt, &a.DoneAt)
	return a, err
}

// Begin records a pending action claimed for claimMS, unless its id or its
// slot (a non-empty slot is unique) is taken or the run does not exist:
// true when this call wrote it.
func (a Actions) Begin(ctx context.Context, q Querier, r ActionRow, claimMS int64) (bool, error) {
	var slot any
	if r.Slot.Valid {
		slot = r.Slot.String
	}
	res, err := q.ExecContext(ctx, a.d.SQL(`INSERT INTO autocapture_actions (id, run_id, kind, arg, user_id, user_name,
			state, slot, ends_at, claimed_until, created_at)
		SELECT CAST($1 AS TEXT), CAST($2 AS TEXT), CAST($3 AS TEXT), CAST($4 AS TEXT), CAST($5 AS TEXT), CAST($6 AS TEXT),
			'pending', CAST($7 AS TEXT), CAST($8 AS BIGINT), {now} + CAST($9 AS BIGINT), {now}
		WHERE EXISTS (SELECT 1 FROM autocapture_runs WHERE id = $2)
		ON CONFLICT DO NOTHING`), r.ID, r.RunID, r.Kind, r.Arg, r.UserID, r.UserName, slot, r.EndsAt, claimMS)
	if err != nil {
		return false, err
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// Record keeps an action that made no call (a refused click) as it is,
// once: a retry of the same interaction writes nothing.
func (a Actions) Record(ctx context.Context, q Querier, r ActionRow) error {
	_, err := q.ExecContext(ctx, a.d.SQL(`INSERT INTO autocapture_actions (id, run_id, kind, arg, user_id, user_name,
			state, detail, claimed_until, created_at, done_at)
		SELECT CAST($1 AS TEXT), CAST($2 AS TEXT), CAST($3 AS TEXT), CAST($4 AS TEXT), CAST($5 AS TEXT), CAST($6 AS TEXT),
			CAST($7 AS TEXT), CAST($8 AS TEXT), 0, {now}, {now}
		WHERE EXISTS (SELECT 1 FROM autocapture_runs WHERE id = $2)
		ON CONFLICT DO NOTHING`), r.ID, r.RunID, r.Kind, r.Arg, r.UserID, r.UserName, r.State, r.Detail)
	return err
}

// Claim takes a pending action whose claim has lapsed (its maker died, or
// is long stuck) for claimMS: true when this call took it.
func (a Actions) Claim(ctx context.Context, q Querier, id string, claimMS int64) (bool, error) {
	res, err := q.ExecContext(ctx, a.d.SQL(`UPDATE autocapture_actions SET claimed_until = {now} + CAST($2 AS BIGINT)
		WHERE id = $1 AND state = 'pending' AND claimed_until < {now}`), id, claimMS)
	if err != nil {
		return false, err
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// Finish records a pending action's outcome: done (with the silence it made
// or ended) or failed (its slot freed, detail saying why). False when it was
// no longer pending (another finished it).
func (a Actions) Finish(ctx context.Context, q Querier, id, state, silenceID, detail string) (bool, error) {
	res, err := q.ExecContext(ctx, a.d.SQL(`UPDATE autocapture_actions SET state = CAST($2 AS TEXT),
			silence_id = COALESCE(NULLIF(CAST($3 AS TEXT), ''), silence_id), detail = CAST($4 AS TEXT), done_at = {now},
			slot = CASE WHEN CAST($2 AS TEXT) = 'failed' THEN NULL ELSE slot END
		WHERE id = $1 AND state = 'pending'`), id, state, silenceID, detail)
	if err != nil {
		return false, err
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// Release frees an action's slot: its silence was expired.
func (a Actions) Release(ctx context.Context, q Querier, id string) error {
	_, err := q.ExecContext(ctx, `UPDATE autocapture_actions SET slot = NULL WHERE id = $1`, id)
	return err
}

// Get returns action id; sql.ErrNoRows when there is none.
func (Actions) Get(ctx context.Context, q RowQuerier, id string) (ActionRow, error) {
	return scanAction(q.QueryRowContext(ctx, `SELECT `+actionColumns+` FROM autocapture_actions WHERE id = $1`, id))
}

// BySlot returns the action holding slot; found false when none does.
func (Actions) BySlot(ctx context.Context, q RowQuerier, slot string) (ActionRow, bool, error) {
	r, err := scanAction(q.QueryRowContext(ctx, `SELECT `+actionColumns+` FROM autocapture_actions WHERE slot = $1`, slot))
	if errors.Is(err, sql.ErrNoRows) {
		return r, false, nil
	}
	return r, err == nil, err
}

// List returns run runID's actions, oldest first.
func (Actions) List(ctx context.Context, q RowsQuerier, runID string) ([]ActionRow, error) {
	return scanActions(q.QueryContext(ctx, `SELECT `+actionColumns+` FROM autocapture_actions
		WHERE run_id = $1 ORDER BY created_at, id`, runID))
}

// Stale returns up to limit pending actions whose claim has lapsed.
func (a Actions) Stale(ctx context.Context, q RowsQuerier, limit int) ([]ActionRow, error) {
	return scanActions(q.QueryContext(ctx, a.d.SQL(`SELECT `+actionColumns+` FROM autocapture_actions
		WHERE state = 'pending' AND claimed_until < {now} ORDER BY claimed_until LIMIT $1`), limit))
}

func scanActions(rows *sql.Rows, err error) ([]ActionRow, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []ActionRow{}
	for rows.Next() {
		r, err := scanAction(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// ResolvedSilences returns up to limit actions holding a live silence "until
// resolved" whose run's alert has resolved: the silences to expire now.
func (Actions) ResolvedSilences(ctx context.Context, q RowsQuerier, limit int) ([]ActionRow, error) {
	return scanActions(q.QueryContext(ctx, `SELECT `+prefixed("a.", actionColumns)+` FROM autocapture_actions a
		JOIN autocapture_runs r ON r.id = a.run_id
		WHERE a.slot IS NOT NULL AND a.state = 'done' AND a.kind = 'silence' AND a.arg = 'resolved'
			AND r.resolved_at IS NOT NULL
		ORDER BY a.created_at LIMIT $1`, limit))
}

// prefixed qualifies each of a comma-separated column list with p.
func prefixed(p, cols string) string {
	fields := strings.Split(cols, ",")
	for i, f := range fields {
		fields[i] = p + strings.TrimSpace(f)
	}
	return strings.Join(fields, ", ")
}

// Rearm takes a failed action again, pending and claimed for claimMS, for
// userID (who clicked again): an Unsilence whose expiry failed stays usable.
// False when it was not failed.
func (a Actions) Rearm(ctx context.Context, q Querier, id, userID, userName string, claimMS int64) (bool, error) {
	res, err := q.ExecContext(ctx, a.d.SQL(`UPDATE autocapture_actions SET state = 'pending', detail = '', done_at = NULL,
			attempt = attempt + 1,
			user_id = CAST($2 AS TEXT), user_name = CAST($3 AS TEXT), claimed_until = {now} + CAST($4 AS BIGINT)
		WHERE id = $1 AND state = 'failed'`), id, userID, userName, claimMS)
	if err != nil {
		return false, err
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}
