package lifecycle

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/runner/outbox"
	"github.com/autocapture/autocapture/vocab"
)

// TestHungRenewalStopsTheRun: when the lease cannot be renewed because the store
// hangs (here: SQLite's write lock held by a transaction that does not end, so
// the heartbeat's own connection waits on busy_timeout), the run's steps are
// interrupted before the lease can lapse, so no other process can take the run
// over while this one still works on it.
func TestHungRenewalStopsTheRun(t *testing.T) {
	c := fakestep.NewCounter()
	started := make(chan string, 1)
	stopped := make(chan error, 1)
	hold := fakestep.Func(func(ctx context.Context, in *vocab.Input) (*vocab.Result, error) {
		defer c.Enter(in.RunID + "/" + in.StepID)()
		started <- in.StepID
		<-ctx.Done()
		stopped <- context.Cause(ctx)
		return nil, ctx.Err()
	})
	db := testenv.DB{Path: filepath.Join(t.TempDir(), "autocapture.db")}
	s := newProc(t, db, planner(func() playbooks.PlannedStep { return fakestep.Step("hold", vocab.TierMetrics, hold) }), true)
	acceptOne(t, s, firing("hung", time.Now()))
	<-started

	tx, err := s.raw.BeginTx(context.Background(), nil) // BEGIN IMMEDIATE: the heartbeat now waits for the lock
	if err != nil {
		t.Fatal(err)
	}
	held := time.Now()
	select {
	case cause := <-stopped:
		if !errors.Is(cause, executor.ErrInterrupted) {
			t.Fatalf("step stopped by %v, want an interruption", cause)
		}
		t.Logf("stopped %s after the store hung (lease %s, heartbeat %s)", time.Since(held), s.Config().LeaseTimeout, s.Config().HeartbeatInterval)
	case <-time.After(10 * s.Config().LeaseTimeout):
		t.Fatal("the run kept working although its lease could not be renewed")
	}
	tx.Rollback()
}

// TestUnreadableRunFailsOnce: a run row that cannot be decoded fails with the
// reason, instead of being released and resumed over and over.
func TestUnreadableRunFailsOnce(t *testing.T) {
	t.Parallel()
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		c := fakestep.NewCounter()
		s := newProc(t, db, planner(func() playbooks.PlannedStep { return fakestep.Step("a", vocab.TierMetrics, fakestep.OK(c, nil)) }), false)
		acc := acceptOne(t, s, firing("corrupt", time.Now()))
		ctx := context.Background()
		if _, err := s.db.ExecContext(ctx, `UPDATE autocapture_runs SET alert = '{not json' WHERE id = $1`, acc.RunID); err != nil {
			t.Fatal(err)
		}
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		var status vocab.Status
		var reason string
		var generation int
		deadline := time.Now().Add(30 * time.Second)
		for status != vocab.StatusFailed && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
			if err := s.db.QueryRowContext(ctx, `SELECT status, reason, generation FROM autocapture_runs WHERE id = $1`,
				acc.RunID).Scan(&status, &reason, &generation); err != nil {
				t.Fatal(err)
			}
		}
		if status != vocab.StatusFailed || !strings.Contains(reason, "cannot read the run") {
			t.Fatalf("status %q reason %q", status, reason)
		}
		time.Sleep(3 * s.Config().LeaseTimeout) // long enough for a reaper to take it again, if it would
		var after int
		s.db.QueryRowContext(ctx, `SELECT generation FROM autocapture_runs WHERE id = $1`, acc.RunID).Scan(&after)
		if after != generation || c.Count(acc.RunID+"/a") != 0 {
			t.Fatalf("generation %d -> %d, steps run %d: the failed run was taken again", generation, after, c.Count(acc.RunID+"/a"))
		}
	})
}

// TestCancelBetweenOwnersClosesTheThread: a run that already opened its thread
// and is cancelled while no process holds it ends cancelled with its thread
// closed (the parent message must not stay "running").
func TestCancelBetweenOwnersClosesTheThread(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		c := fakestep.NewCounter()
		s := newProc(t, db, planner(func() playbooks.PlannedStep { return fakestep.Step("a", vocab.TierMetrics, fakestep.OK(c, nil)) }), false)
		ctx := context.Background()
		acc := acceptOne(t, s, firing("between", time.Now()))
		// As a run released by a process that had recorded its parent message.
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		// The outbox's thread row, which Cancel reads (an Open's).
		if _, err := tx.ExecContext(ctx, `INSERT INTO autocapture_threads (run_id, sink) VALUES ($1, 'default')`, acc.RunID); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE autocapture_runs SET status = $1 WHERE id = $2`, vocab.StatusRunning, acc.RunID); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Cancel(ctx, acc.RunID); err != nil {
			t.Fatal(err)
		}
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		r := waitRun(t, s, acc.RunID, "the cancelled run to end", isFinished)
		s.out.eventually(t, acc.RunID, outbox.Finished{}.Key())
		sum, err := s.Seams().Thread.Summary(ctx, acc.RunID, outbox.Finished{}.Key(), false)
		if err != nil {
			t.Fatal(err)
		}
		if n := s.out.count(t, acc.RunID, outbox.Finished{}.Key()); r.Status != vocab.StatusCancelled || n != 1 || sum.Status != vocab.StatusCancelled ||
			c.Count(acc.RunID+"/a") != 0 {
			t.Fatalf("status %s, %d closes saying %+v, steps run %d", r.Status, n, sum, c.Count(acc.RunID+"/a"))
		}
	})
}
