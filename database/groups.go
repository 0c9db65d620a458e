package database

import "context"

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
