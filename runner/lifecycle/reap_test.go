package lifecycle

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/vocab"
)

// dbTime is an SQL expression for the database's clock plus secs, in the
// format River stores on each dialect.
func dbTime(s *proc, secs int) string {
	if s.dialect == database.Postgres {
		return fmt.Sprintf("now() + make_interval(secs => %d)", secs)
	}
	return fmt.Sprintf("datetime('now', 'subsec', '%+d seconds')", secs)
}

// jobArg is an SQL expression reading one field of a River job's args.
func jobArg(s *proc, field string) string {
	if s.dialect == database.Postgres {
		return "(args->>'" + field + "')"
	}
	return "json_extract(args, '$." + field + "')"
}

// setJob rewrites the River job of run id (generation 0) the way a crash or
// the queue leaves it; set is an SQL SET list.
func setJob(t *testing.T, s *proc, id, set string) {
	t.Helper()
	res, err := s.db.ExecContext(context.Background(), `UPDATE river_job SET `+set+` WHERE `+jobArg(s, "run_id")+` = $1`, id)
	if err != nil {
		t.Fatalf("set job of run %s: %v", id, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("set job of run %s: %d rows", id, n)
	}
}

// liveJobs counts run id's jobs of a generation that River will still work.
func liveJobs(t *testing.T, s *proc, id string, gen int) int {
	t.Helper()
	var want any = gen // json_extract yields an integer on SQLite, ->> text on PostgreSQL
	if s.dialect == database.Postgres {
		want = fmt.Sprint(gen)
	}
	var n int
	err := s.db.QueryRowContext(context.Background(), `SELECT COUNT(*) FROM river_job WHERE `+jobArg(s, "run_id")+` = $1
		AND `+jobArg(s, "generation")+` = $2 AND state = 'available'`, id, want).Scan(&n)
	if err != nil {
		t.Fatalf("jobs of run %s: %v", id, err)
	}
	return n
}

// TestReaperTakesStrandedQueuedRuns simulates the crash gap between River
// fetching a job and the worker claiming its run, by leaving the job rows the
// way such a crash (or a job that gave up) leaves them: the reaper must resume
// those runs, and only those, and they then complete.
func TestReaperTakesStrandedQueuedRuns(t *testing.T) {
	t.Parallel()
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		c := fakestep.NewCounter()
		// A lease longer than a slow machine's set-up: "fetched just now" must
		// still be within it when the reaper looks; it is taken once it passes.
		s := newProc(t, db, planner(func() playbooks.PlannedStep { return fakestep.Step("a", vocab.TierMetrics, fakestep.OK(c, nil)) }), false,
			withConfig(func(r *config.Runs) { r.LeaseTimeout = 10 * time.Second }))
		cases := []struct {
			name     string
			set      func() string // "" leaves the job as Accept made it
			stranded bool          // the reaper must take it at once
		}{
			{"fetched, then the process died", func() string {
				return "state = 'running', attempt = 1, attempted_at = " + dbTime(s, -3600)
			}, true},
			{"gave up after store failures", func() string {
				return "state = 'discarded', attempt = 5, finalized_at = " + dbTime(s, 0)
			}, true},
			{"fetched just now, about to claim", func() string {
				return "state = 'running', attempt = 1, attempted_at = " + dbTime(s, 0)
			}, false},
			{"waiting for a worker slot (runs.max_concurrent)", func() string { return "" }, false},
			{"snoozed for a playbook slot (max_concurrent)", func() string {
				return "state = 'scheduled', scheduled_at = " + dbTime(s, 3600)
			}, false},
		}
		ids := make([]string, len(cases))
		for i, tc := range cases {
			ids[i] = acceptOne(t, s, firing(fmt.Sprintf("fp%d", i), time.Now().UTC())).RunID
			if set := tc.set(); set != "" {
				setJob(t, s, ids[i], set)
			}
		}
		// Every run has waited far longer than lease_timeout.
		if _, err := s.db.ExecContext(context.Background(), `UPDATE autocapture_runs SET queued_at = queued_at - 3600000`); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		n, err := s.ReapOnce(ctx)
		if err != nil {
			t.Fatalf("reap: %v", err)
		}
		for i, tc := range cases {
			r, err := s.Get(ctx, ids[i])
			if err != nil {
				t.Fatal(err)
			}
			l := leaseOf(t, s, ids[i])
			taken := l.generation == 1 && r.Resumed == 1 && r.Status == vocab.StatusQueued && !l.owner.Valid
			if taken != tc.stranded {
				t.Errorf("%s: generation %d resumed %d status %s; taken = %v, want %v", tc.name, l.generation, r.Resumed, r.Status, taken, tc.stranded)
			}
			if tc.stranded && liveJobs(t, s, ids[i], 1) != 1 {
				t.Errorf("%s: taken without a fresh job for generation 1", tc.name)
			}
		}
		if n != 2 {
			t.Errorf("reaper took %d runs, want 2", n)
		}
		if n, err := s.ReapOnce(ctx); err != nil || n != 0 {
			t.Errorf("second pass took %d (%v), want 0: the fresh jobs are live", n, err)
		}

		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		for i, tc := range cases[:4] {
			r := waitRun(t, s, ids[i], "finished", isFinished)
			wantResumed := 0
			if i < 3 { // the job fetched "just now" is never claimed either: taken once lease_timeout passed
				wantResumed = 1
			}
			if r.Status != vocab.StatusSucceeded || r.Resumed != wantResumed || c.Count(ids[i]+"/a") != 1 {
				t.Errorf("%s: run %s resumed %d, step ran %d times; want succeeded, resumed %d, once",
					tc.name, r.Status, r.Resumed, c.Count(ids[i]+"/a"), wantResumed)
			}
		}
		if r, _ := s.Get(ctx, ids[4]); r.Status != vocab.StatusQueued || r.Resumed != 0 {
			t.Errorf("snoozed run %s resumed %d after the others finished; want still queued, not resumed", r.Status, r.Resumed)
		}
	})
}

// isClaim says whether query is the claim of a run.
func isClaim(s *proc, query string) bool { return query == s.dialect.SQL(database.QClaim) }

// TestReaperTakesRunStuckBetweenFetchAndClaim leaves River's own state: the
// worker of the run's first job hangs after River fetched it and before it
// claims the run, as a process dying there would. The run still completes,
// once, through a fresh job.
func TestReaperTakesRunStuckBetweenFetchAndClaim(t *testing.T) {
	t.Parallel()
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		c := fakestep.NewCounter()
		unblock := make(chan struct{})
		stuck := make(chan struct{}, 1)
		s := newProc(t, db, planner(func() playbooks.PlannedStep { return fakestep.Step("a", vocab.TierMetrics, fakestep.OK(c, nil)) }), false)
		// The claim of generation 0 hangs, as a process that died after River's fetch.
		s.db.Hold = func(ctx context.Context, query string, args []any) {
			if !isClaim(s, query) || args[len(args)-1] != 0 {
				return
			}
			stuck <- struct{}{}
			select {
			case <-unblock:
			case <-ctx.Done():
			}
		}
		t.Cleanup(func() { close(unblock) }) // runs before the service's own cleanup
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		id := acceptOne(t, s, firing("fp", time.Now().UTC())).RunID
		fakestep.WaitFor(t, stuck, "River to fetch the job")
		r := waitRun(t, s, id, "finished", isFinished)
		if r.Status != vocab.StatusSucceeded || r.Resumed != 1 || r.Attempts != 1 || c.Count(id+"/a") != 1 {
			t.Fatalf("run %s resumed %d attempts %d, step ran %d times; want succeeded, resumed once, one attempt, once",
				r.Status, r.Resumed, r.Attempts, c.Count(id+"/a"))
		}
	})
}

// TestReaperLeavesARunUnclaimedForASlot is the window between a worker
// handing a run back for want of a playbook slot (Unclaim) and River's
// completer writing the job's snooze: the job still reads 'running' with the
// attempted_at of its fetch. Under load that fetch can be lease_timeout old;
// the reaper must not take the run for stranded while its unclaim is fresh
// (a spurious resume and reply), and must take it once the unclaim is older
// than lease_timeout and the job still never moved (the process died there).
func TestReaperLeavesARunUnclaimedForASlot(t *testing.T) {
	t.Parallel()
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		s := newProc(t, db, planner(func() playbooks.PlannedStep { return fakestep.Step("a", vocab.TierMetrics, fakestep.OK(nil, nil)) }), false)
		ctx := context.Background()
		id := acceptOne(t, s, firing("fp", time.Now().UTC())).RunID
		// Fetched an hour ago as far as River's row says, its snooze unwritten.
		setJob(t, s, id, "state = 'running', attempt = 1, attempted_at = "+dbTime(s, -3600))
		unclaimedAgo := func(ms int) {
			t.Helper()
			if _, err := s.db.ExecContext(ctx, s.dialect.SQL(`UPDATE autocapture_runs SET queued_at = queued_at - 3600000,
				unclaimed_at = {now} - $1 WHERE id = $2`), ms, id); err != nil {
				t.Fatal(err)
			}
		}
		unclaimedAgo(0)
		if n, err := s.ReapOnce(ctx); err != nil || n != 0 {
			t.Fatalf("reaper took %d runs (%v) unclaimed just now, want 0: River may not have written the snooze yet", n, err)
		}
		if l := leaseOf(t, s, id); l.generation != 0 {
			t.Fatalf("generation %d after a reap of a fresh unclaim, want 0", l.generation)
		}
		unclaimedAgo(int(fastRuns().LeaseTimeout.Milliseconds()) + 1000)
		if n, err := s.ReapOnce(ctx); err != nil || n != 1 {
			t.Fatalf("reaper took %d runs (%v) unclaimed past lease_timeout with its job never moved, want 1", n, err)
		}
		if l := leaseOf(t, s, id); l.generation != 1 || liveJobs(t, s, id, 1) != 1 {
			t.Fatalf("taken run: generation %d, %d live jobs of generation 1; want 1 and 1", l.generation, liveJobs(t, s, id, 1))
		}
	})
}
