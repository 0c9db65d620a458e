package database

import (
	"context"
	"database/sql"
)

// Uploads is autocapture_uploads: one row per artifact key spooled on a
// replica while the artifact store was down, pending until uploaded.
type Uploads struct{ d Dialect }

// Upload is a row of autocapture_uploads.
type Upload struct {
	Key, RunID, Replica string
	Size                int64
	SHA256              string
	State               string // pending or uploaded
	Attempts            int
	LastError           string
	CreatedAt           int64         // Unix ms
	UploadedAt          sql.NullInt64 // Unix ms
}

// Record writes u's row as pending; with repend a row already there is made
// pending again (when it was uploaded and is spooled anew), else it is left
// as it is. It says whether it wrote.
func (t Uploads) Record(ctx context.Context, q Querier, u Upload, repend bool) (bool, error) {
	onConflict := `DO NOTHING`
	if repend {
		onConflict = `DO UPDATE SET state = 'pending', replica = excluded.replica, size = excluded.size,
			sha256 = excluded.sha256, uploaded_at = NULL`
	}
	res, err := q.ExecContext(ctx, t.d.SQL(`INSERT INTO autocapture_uploads
		(object_key, run_id, replica, size, sha256, state, created_at) VALUES ($1, $2, $3, $4, $5, 'pending', {now})
		ON CONFLICT (object_key) `+onConflict), u.Key, u.RunID, u.Replica, u.Size, u.SHA256)
	if err != nil {
		return false, err
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

// Pending lists the keys pending on replica.
func (Uploads) Pending(ctx context.Context, q RowsQuerier, replica string) ([]string, error) {
	rows, err := q.QueryContext(ctx, `SELECT object_key FROM autocapture_uploads WHERE replica = $1 AND state = 'pending'`, replica)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, rows.Err()
}

// Get reads key's state, sha256, run and attempts (sql.ErrNoRows: no row).
func (Uploads) Get(ctx context.Context, q RowQuerier, key string) (Upload, error) {
	u := Upload{Key: key}
	err := q.QueryRowContext(ctx, `SELECT state, sha256, run_id, attempts FROM autocapture_uploads WHERE object_key = $1`, key).
		Scan(&u.State, &u.SHA256, &u.RunID, &u.Attempts)
	return u, err
}

// State reads key's state (sql.ErrNoRows: no row).
func (Uploads) State(ctx context.Context, q RowQuerier, key string) (string, error) {
	var state string
	err := q.QueryRowContext(ctx, `SELECT state FROM autocapture_uploads WHERE object_key = $1`, key).Scan(&state)
	return state, err
}

// Failed counts a failed attempt at key and keeps its error.
func (Uploads) Failed(ctx context.Context, q Querier, key, lastError string) error {
	_, err := q.ExecContext(ctx, `UPDATE autocapture_uploads SET attempts = attempts + 1, last_error = $1 WHERE object_key = $2`,
		lastError, key)
	return err
}

// MarkUploaded marks key uploaded if it was pending, and says whether it was.
func (t Uploads) MarkUploaded(ctx context.Context, q Querier, key string) (bool, error) {
	res, err := q.ExecContext(ctx, t.d.SQL(`UPDATE autocapture_uploads SET state = 'uploaded', uploaded_at = {now}, last_error = ''
		WHERE object_key = $1 AND state = 'pending'`), key)
	if err != nil {
		return false, err
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// Counts are run runID's pending and uploaded rows.
func (Uploads) Counts(ctx context.Context, q RowQuerier, runID string) (pending, uploaded int, err error) {
	err = q.QueryRowContext(ctx, `SELECT
			COALESCE(SUM(CASE WHEN state = 'pending' THEN 1 ELSE 0 END), 0),
			COALESCE(SUM(CASE WHEN state = 'uploaded' THEN 1 ELSE 0 END), 0)
			FROM autocapture_uploads WHERE run_id = $1`, runID).Scan(&pending, &uploaded)
	return pending, uploaded, err
}

// List returns run runID's rows, oldest first (nil for none).
func (Uploads) List(ctx context.Context, q RowsQuerier, runID string) ([]Upload, error) {
	rows, err := q.QueryContext(ctx, `SELECT object_key, replica, size, state, attempts, last_error, created_at, uploaded_at
		FROM autocapture_uploads WHERE run_id = $1 ORDER BY created_at, object_key`, runID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Upload
	for rows.Next() {
		u := Upload{RunID: runID}
		if err := rows.Scan(&u.Key, &u.Replica, &u.Size, &u.State, &u.Attempts, &u.LastError, &u.CreatedAt, &u.UploadedAt); err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, rows.Err()
}
