package database

import (
	"context"
	"database/sql"
	"errors"
)

// Runs is autocapture_runs, a row per alert run.
type Runs struct{ d Dialect }

// Exists says whether run id is in the store.
func (Runs) Exists(ctx context.Context, q RowQuerier, id string) (bool, error) {
	var one int
	err := q.QueryRowContext(ctx, `SELECT 1 FROM autocapture_runs WHERE id = $1`, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}
