package database

import (
	"context"
	"database/sql"
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
