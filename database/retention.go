package database

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/autocapture/autocapture/vocab"
)

// RunTables are the tables holding a run's rows besides autocapture_runs, by
// run_id (all ON DELETE CASCADE too; deleted by name so a database without
// enforced foreign keys loses none). autocapture_cooldowns is keyed by the
// cooldown, not the run: its one row per key stays, or a cooldown longer than
// retention would end early.
var RunTables = []string{"autocapture_feedback", "autocapture_actions", "autocapture_outbox", "autocapture_threads",
	"autocapture_steps", "autocapture_run_playbooks", "autocapture_uploads", "autocapture_verdicts",
	// tier 3 (runner/profiling). A run still holding a profile lease
	// (a stop that never answered) is not selected (Runs.Old): the target
	// stays leased.
	"autocapture_profile_leases", "autocapture_profile_starts", "autocapture_profile_reports",
	"autocapture_profile_events"}

// LeadTables are keyed by a group's lead run (runner/grouping's group.go): a
// group and its fleet claim go with their lead. Its members are as old (a
// group gathers within notify.storm.window) and are deleted on the same
// tick or the next.
var LeadTables = []string{"autocapture_groups", "autocapture_fleets"}

// ForUpdate locks the selected row on PostgreSQL (SQLite's BEGIN IMMEDIATE
// holds the database already): a clause to end a SELECT with.
func (d Dialect) ForUpdate() string {
	if d == Postgres {
		return ` FOR UPDATE`
	}
	return ""
}

// OldRun is a finished run retention may delete.
type OldRun struct {
	ID, Alertname string
	CreatedAt     int64 // Unix ms
	ManifestKey   string
}

// Old selects up to limit finished runs older than ageMS on the database's
// clock, oldest first: not of the unfinished statuses (queued, running),
// none still holding a profile lease.
func (r Runs) Old(ctx context.Context, q RowsQuerier, ageMS int64, limit int) ([]OldRun, error) {
	rows, err := q.QueryContext(ctx, r.d.SQL(`SELECT id, alertname, created_at, COALESCE(manifest_key, '')
		FROM autocapture_runs WHERE finished_at IS NOT NULL AND finished_at < {now} - $1 AND status NOT IN ($2, $3)
		AND NOT EXISTS (SELECT 1 FROM autocapture_profile_leases l WHERE l.run_id = autocapture_runs.id)
		ORDER BY finished_at, id LIMIT $4`), ageMS, string(vocab.StatusQueued), string(vocab.StatusRunning), limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []OldRun
	for rows.Next() {
		var o OldRun
		if err := rows.Scan(&o.ID, &o.Alertname, &o.CreatedAt, &o.ManifestKey); err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, rows.Err()
}

// LockOld locks run id in q's transaction if it is still finished and older
// than ageMS (on the database's clock); false when it is gone or no longer
// old enough.
func (r Runs) LockOld(ctx context.Context, q RowQuerier, id string, ageMS int64) (bool, error) {
	var got string
	err := q.QueryRowContext(ctx, r.d.SQL(`SELECT id FROM autocapture_runs WHERE id = $1
		AND finished_at IS NOT NULL AND finished_at < {now} - $2`+r.d.ForUpdate()), id, ageMS).Scan(&got)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// Delete deletes run id's rows: those of RunTables and LeadTables, then the
// run's own. An error names the table it met it in (but the run's own).
func (Runs) Delete(ctx context.Context, q Querier, id string) error {
	for _, t := range RunTables {
		if _, err := q.ExecContext(ctx, `DELETE FROM `+t+` WHERE run_id = $1`, id); err != nil {
			return fmt.Errorf("%s: %w", t, err)
		}
	}
	for _, t := range LeadTables {
		if _, err := q.ExecContext(ctx, `DELETE FROM `+t+` WHERE lead_run = $1`, id); err != nil {
			return fmt.Errorf("%s: %w", t, err)
		}
	}
	_, err := q.ExecContext(ctx, `DELETE FROM autocapture_runs WHERE id = $1`, id)
	return err
}
