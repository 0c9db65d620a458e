package database

import "context"

// ProfilePause is autocapture_profile_pause: the one fleet-wide pause row of
// tier-3 profiling (id 1, seeded by migration 11).
type ProfilePause struct{ d Dialect }

// PauseRow is the pause: whether it is on, who changed it last, when (Unix
// ms, 0: never) and why.
type PauseRow struct {
	Paused     bool
	By, Reason string
	At         int64
}

// Get reads the pause.
func (ProfilePause) Get(ctx context.Context, q RowQuerier) (PauseRow, error) {
	var p PauseRow
	var paused int
	err := q.QueryRowContext(ctx, `SELECT paused, changed_by, changed_at, reason FROM autocapture_profile_pause WHERE id = 1`).
		Scan(&paused, &p.By, &p.At, &p.Reason)
	p.Paused = paused == 1
	return p, err
}

// Pause turns the pause on, by operator by for reason, at the database's clock.
func (p ProfilePause) Pause(ctx context.Context, q Querier, by, reason string) error {
	_, err := q.ExecContext(ctx, p.d.SQL(`UPDATE autocapture_profile_pause SET paused = 1, changed_by = $1,
		changed_at = {now}, reason = $2 WHERE id = 1`), by, reason)
	return err
}

// Resume turns the pause off, by operator by.
func (p ProfilePause) Resume(ctx context.Context, q Querier, by string) error {
	_, err := q.ExecContext(ctx, p.d.SQL(`UPDATE autocapture_profile_pause SET paused = 0, changed_by = $1,
		changed_at = {now}, reason = '' WHERE id = 1`), by)
	return err
}
