package database

import "context"

// Keys is autocapture_keys: keys the daemon generates once and every replica
// shares, by name.
type Keys struct{}

// Offer stores value under name unless a key of that name is there already
// (ON CONFLICT DO NOTHING): replicas offering theirs together leave exactly
// one, which Get then reads on every replica.
func (Keys) Offer(ctx context.Context, q Querier, name, value string) error {
	_, err := q.ExecContext(ctx, `INSERT INTO autocapture_keys (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`,
		name, value)
	return err
}

// Get reads the key stored under name (sql.ErrNoRows: none).
func (Keys) Get(ctx context.Context, q RowQuerier, name string) (string, error) {
	var v string
	err := q.QueryRowContext(ctx, `SELECT value FROM autocapture_keys WHERE name = $1`, name).Scan(&v)
	return v, err
}
