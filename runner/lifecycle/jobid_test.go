package lifecycle

import (
	"context"
	"testing"
	"time"

	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
)

// TestJobIDsRecordedAndBackfilled: Accept and the reaper record each run's
// job id in the transaction that enqueues it, and migration 3's backfill
// finds the same job from the job's args for runs enqueued before it.
func TestJobIDsRecordedAndBackfilled(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		ctx := context.Background()
		s := newProc(t, db, planner(), false)
		id := acceptOne(t, s, firing("fp", time.Now().UTC())).RunID
		jobOf := func(gen int) int64 {
			t.Helper()
			var job int64
			if err := s.db.QueryRowContext(ctx, `SELECT id FROM river_job WHERE `+jobArg(s, "run_id")+` = $1
				AND CAST(`+jobArg(s, "generation")+` AS INTEGER) = $2`, id, gen).Scan(&job); err != nil {
				t.Fatalf("job of generation %d: %v", gen, err)
			}
			return job
		}
		recorded := func() int64 {
			t.Helper()
			var job int64
			if err := s.db.QueryRowContext(ctx, `SELECT COALESCE(river_job_id, 0) FROM autocapture_runs WHERE id = $1`, id).Scan(&job); err != nil {
				t.Fatal(err)
			}
			return job
		}
		if got, want := recorded(), jobOf(0); got != want {
			t.Fatalf("accepted run records job %d, want %d", got, want)
		}
		setJob(t, s, id, "state = 'discarded', finalized_at = "+dbTime(s, 0))
		if _, err := s.db.ExecContext(ctx, `UPDATE autocapture_runs SET queued_at = queued_at - 3600000 WHERE id = $1`, id); err != nil {
			t.Fatal(err)
		}
		if n, err := s.ReapOnce(ctx); err != nil || n != 1 {
			t.Fatalf("reaper took %d (%v), want the stranded run", n, err)
		}
		if got, want := recorded(), jobOf(1); got != want {
			t.Fatalf("resumed run records job %d, want generation 1's %d", got, want)
		}
		if _, err := s.db.ExecContext(ctx, `UPDATE autocapture_runs SET river_job_id = NULL`); err != nil {
			t.Fatal(err)
		}
		backfill := database.Migrations(s.dialect)[2].Statements()[1]
		if _, err := s.db.ExecContext(ctx, backfill); err != nil {
			t.Fatalf("backfill: %v", err)
		}
		if got, want := recorded(), jobOf(1); got != want {
			t.Fatalf("backfill set job %d, want generation 1's %d", got, want)
		}
	})
}
