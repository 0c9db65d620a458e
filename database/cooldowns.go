package database

import (
	"context"
	"database/sql"
	"errors"

	"github.com/autocapture/autocapture/internal/untrusted"
)

// Cooldowns is autocapture_cooldowns: one claim per (scope, key), the run
// that took it and when (the database's clock). Playbook and step cooldowns
// are the same claim in two scopes.
type Cooldowns struct{ d Dialect }

// qClaimCooldown takes cooldown key $2 of scope $1 for run $3 unless another
// run took it less than $4 ms ago on the database's clock; the run that holds
// it keeps it, with its first time (a resumed run). It is one statement, so
// the check and the claim cannot be split: on PostgreSQL a second run's insert
// waits for the first's transaction and then re-reads the condition on the
// row it committed (READ COMMITTED, the default); SQLite's writes are serial.
const qClaimCooldown = `INSERT INTO autocapture_cooldowns (scope, cooldown_key, run_id, claimed_at)
	VALUES ($1, $2, $3, {now})
	ON CONFLICT (scope, cooldown_key) DO UPDATE SET run_id = excluded.run_id,
		claimed_at = CASE WHEN autocapture_cooldowns.run_id = excluded.run_id
			THEN autocapture_cooldowns.claimed_at ELSE excluded.claimed_at END
	WHERE autocapture_cooldowns.run_id = excluded.run_id
		OR autocapture_cooldowns.claimed_at < excluded.claimed_at - $4
	RETURNING run_id`

// Claim takes key of scope for runID, or returns the run that holds it
// inside the cooldown of withinMS and when that run took it (Unix ms);
// holder is "" when the claim is runID's.
func (c Cooldowns) Claim(ctx context.Context, q RowQuerier, scope, key, runID string, withinMS int64) (holder string, atMS int64, err error) {
	key = untrusted.Key(key)
	var got string
	err = q.QueryRowContext(ctx, c.d.SQL(qClaimCooldown), scope, key, runID, withinMS).Scan(&got)
	if err == nil {
		return "", 0, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return "", 0, err
	}
	if err := q.QueryRowContext(ctx, `SELECT run_id, claimed_at FROM autocapture_cooldowns
		WHERE scope = $1 AND cooldown_key = $2`, scope, key).Scan(&holder, &atMS); err != nil {
		return "", 0, err
	}
	return holder, atMS, nil
}

// Recent counts the claims of key in scope taken less than withinMS ago.
func (c Cooldowns) Recent(ctx context.Context, q RowQuerier, scope, key string, withinMS int64) (int, error) {
	key = untrusted.Key(key)
	var n int
	err := q.QueryRowContext(ctx, c.d.SQL(`SELECT COUNT(*) FROM autocapture_cooldowns
		WHERE scope = $1 AND cooldown_key = $2 AND claimed_at >= {now} - $3`),
		scope, key, withinMS).Scan(&n)
	return n, err
}

// Release gives key of scope back if runID holds it.
func (Cooldowns) Release(ctx context.Context, q Querier, scope, key, runID string) error {
	_, err := q.ExecContext(ctx, `DELETE FROM autocapture_cooldowns
			WHERE scope = $1 AND cooldown_key = $2 AND run_id = $3`, scope, untrusted.Key(key), runID)
	return err
}
