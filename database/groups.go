package database

import (
	"context"
	"database/sql"

	"github.com/autocapture/autocapture/internal/untrusted"
)

// Groups is autocapture_groups (a row per group of runs sharing a thread,
// keyed by its lead run, with that thread's outbox counter) and
// autocapture_fleets (each fleet key's open fleet).
type Groups struct{ d Dialect }

// NextOutboxSeq numbers the next operation of the thread of the group led
// by lead (the group's counter, bumped under its row's lock).
func (Groups) NextOutboxSeq(ctx context.Context, q RowQuerier, lead string) (int, error) {
	var seq int
	err := q.QueryRowContext(ctx, `UPDATE autocapture_groups SET outbox_seq = outbox_seq + 1 WHERE lead_run = $1 RETURNING outbox_seq`, lead).Scan(&seq)
	return seq, err
}

// Kind reads the kind of the group lead leads (sql.ErrNoRows: none).
func (Groups) Kind(ctx context.Context, q RowQuerier, lead string) (string, error) {
	var kind string
	err := q.QueryRowContext(ctx, `SELECT kind FROM autocapture_groups WHERE lead_run = $1`, lead).Scan(&kind)
	return kind, err
}

// Of reads run runID's group lead and that group's kind (either not Valid:
// no group, or its lead is gone; sql.ErrNoRows: no such run).
func (Groups) Of(ctx context.Context, q RowQuerier, runID string) (lead, kind sql.NullString, err error) {
	err = q.QueryRowContext(ctx, `SELECT r.group_lead, g.kind FROM autocapture_runs r
		LEFT JOIN autocapture_groups g ON g.lead_run = r.group_lead WHERE r.id = $1`, runID).Scan(&lead, &kind)
	return lead, kind, err
}

// Open creates the group of kind led by lead, opened at openedAt (Unix ms),
// with its thread on channel.
func (Groups) Open(ctx context.Context, q Querier, lead, kind, channel string, openedAt int64) error {
	_, err := q.ExecContext(ctx, `INSERT INTO autocapture_groups (lead_run, kind, channel, opened_at)
		VALUES ($1, $2, $3, $4)`, lead, kind, channel, openedAt)
	return err
}

// Join makes runs ids members of the group led by lead, in one statement
// (callers bound the ids).
func (Groups) Join(ctx context.Context, q Querier, lead string, ids []string) error {
	args := []any{lead}
	for _, id := range ids {
		args = append(args, id)
	}
	_, err := q.ExecContext(ctx, `UPDATE autocapture_runs SET group_lead = $1 WHERE id IN (`+
		marks(2, len(ids))+`)`, args...)
	return err
}

// JoinOne makes run id a member of the group led by lead.
func (Groups) JoinOne(ctx context.Context, q Querier, lead, id string) error {
	_, err := q.ExecContext(ctx, `UPDATE autocapture_runs SET group_lead = $1 WHERE id = $2`, lead, id)
	return err
}

// ClaimFleet claims fleet key for run id at nowMS unless a fleet opened at
// or after sinceMS holds it; sql.ErrNoRows when one does (its row is then
// locked by the claim until the transaction ends).
func (Groups) ClaimFleet(ctx context.Context, q RowQuerier, key, id string, nowMS, sinceMS int64) error {
	var lead string
	return q.QueryRowContext(ctx, `INSERT INTO autocapture_fleets (fleet_key, lead_run, opened_at) VALUES ($1, $2, $3)
		ON CONFLICT (fleet_key) DO UPDATE SET lead_run = excluded.lead_run, opened_at = excluded.opened_at
		WHERE autocapture_fleets.opened_at < $4 RETURNING lead_run`,
		untrusted.Key(key), id, nowMS, sinceMS).Scan(&lead)
}

// Fleet reads fleet key's lead run and its group's kind ("" when the lead's
// group is gone).
func (Groups) Fleet(ctx context.Context, q RowQuerier, key string) (lead, kind string, err error) {
	err = q.QueryRowContext(ctx, `SELECT f.lead_run, COALESCE(g.kind, '') FROM autocapture_fleets f
		LEFT JOIN autocapture_groups g ON g.lead_run = f.lead_run WHERE f.fleet_key = $1`, untrusted.Key(key)).Scan(&lead, &kind)
	return lead, kind, err
}

// RestartFleet makes run id fleet key's lead, opened at openedAt.
func (Groups) RestartFleet(ctx context.Context, q Querier, key, id string, openedAt int64) error {
	_, err := q.ExecContext(ctx, `UPDATE autocapture_fleets SET lead_run = $1, opened_at = $2 WHERE fleet_key = $3`,
		id, openedAt, untrusted.Key(key))
	return err
}
