package runner

import (
	"context"
	"fmt"
	"testing"

	"github.com/autocapture/autocapture/runner/lifecycle"
)

// qSeedRuns inserts $1 runs in one statement (both dialects): one in 100
// queued, one in 100 running (owned by "seed-owner", leased for an hour on the
// database's clock $2), the rest succeeded and resolved; ten alertnames on 50
// instances and 7 models, one second apart, the newest created now. Ids are
// seed-<i>.
const qSeedRuns = `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < $1 - 1)
INSERT INTO autocapture_runs (id, run_key, fingerprint, alertname, alert, starts_at, status, resolved_at,
	created_at, queued_at, started_at, finished_at, attempts, owner, lease_until, slot_generation, instance, model_name)
SELECT 'seed-' || CAST(i AS TEXT), 'seed-' || CAST(i AS TEXT) || '@0', 'seedfp-' || CAST(i AS TEXT),
	'Alert' || CAST(i % 10 AS TEXT), '{"labels":{"alertname":"Alert' || CAST(i % 10 AS TEXT) || '","instance":"10.0.0.' ||
	CAST(i % 50 AS TEXT) || ':8000","model_name":"model-' || CAST(i % 7 AS TEXT) || '"}}',
	CAST($2 AS BIGINT) - ($1 - i) * 1000,
	CASE WHEN i % 100 = 0 THEN 'queued' WHEN i % 100 = 1 THEN 'running' ELSE 'succeeded' END,
	CASE WHEN i % 100 > 1 THEN CAST($2 AS BIGINT) - ($1 - i) * 1000 + 60000 END,
	CAST($2 AS BIGINT) - ($1 - i) * 1000, CAST($2 AS BIGINT) - ($1 - i) * 1000,
	CASE WHEN i % 100 <> 0 THEN CAST($2 AS BIGINT) - ($1 - i) * 1000 END,
	CASE WHEN i % 100 > 1 THEN CAST($2 AS BIGINT) - ($1 - i) * 1000 + 60000 END,
	CASE WHEN i % 100 = 0 THEN 0 ELSE 1 END,
	CASE WHEN i % 100 = 1 THEN 'seed-owner' END,
	CASE WHEN i % 100 = 1 THEN CAST($2 AS BIGINT) + 3600000 END,
	CASE WHEN i % 100 = 1 THEN 0 END,
	'10.0.0.' || CAST(i % 50 AS TEXT) || ':8000', 'model-' || CAST(i % 7 AS TEXT)
FROM n`

// qSeedPlaybooks gives every started seeded run one of five playbooks.
const qSeedPlaybooks = `INSERT INTO autocapture_run_playbooks (run_id, playbook, cooldown_key, created_at)
SELECT id, 'pb' || CAST(CAST(substr(id, 6) AS INTEGER) % 5 AS TEXT), '', created_at
FROM autocapture_runs WHERE id LIKE 'seed-%' AND status <> 'queued'`

// seedRuns fills s's store with n runs (see qSeedRuns) fast: two statements,
// then a live River job for each queued run, recorded as enqueue does.
func seedRuns(tb testing.TB, s *Service, n int) {
	tb.Helper()
	ctx := context.Background()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		tb.Fatal(err)
	}
	defer tx.Rollback()
	now, err := dialectOf(s).Now(ctx, tx)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, qSeedRuns, n, now); err != nil {
		tb.Fatalf("seed runs: %v", err)
	}
	if _, err := tx.ExecContext(ctx, qSeedPlaybooks); err != nil {
		tb.Fatalf("seed playbooks: %v", err)
	}
	var jobs []lifecycle.RunJob
	for i := 0; i < n; i += 100 {
		jobs = append(jobs, lifecycle.RunJob{RunID: fmt.Sprintf("seed-%d", i)})
	}
	for len(jobs) > 0 { // River's batch insert, 1000 at a time
		k := min(len(jobs), 1000)
		if err := s.life.Enqueue(ctx, tx, jobs[:k]); err != nil {
			tb.Fatalf("seed jobs: %v", err)
		}
		jobs = jobs[k:]
	}
	if err := tx.Commit(); err != nil {
		tb.Fatal(err)
	}
}
