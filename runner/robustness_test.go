package runner

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/notify"
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
	db := dbRef{Path: filepath.Join(t.TempDir(), "autocapture.db")}
	s := newService(t, db, planner(func() playbooks.PlannedStep { return fakestep.Step("hold", vocab.TierMetrics, hold) }), true)
	acceptOne(t, s, firing("hung", time.Now()))
	<-started

	tx, err := rawDB(s).BeginTx(context.Background(), nil) // BEGIN IMMEDIATE: the heartbeat now waits for the lock
	if err != nil {
		t.Fatal(err)
	}
	held := time.Now()
	select {
	case cause := <-stopped:
		if !errors.Is(cause, executor.ErrInterrupted) {
			t.Fatalf("step stopped by %v, want an interruption", cause)
		}
		t.Logf("stopped %s after the store hung (lease %s, heartbeat %s)", time.Since(held), s.life.Config().LeaseTimeout, s.life.Config().HeartbeatInterval)
	case <-time.After(10 * s.life.Config().LeaseTimeout):
		t.Fatal("the run kept working although its lease could not be renewed")
	}
	tx.Rollback()
}

// TestUnreadableRunFailsOnce: a run row that cannot be decoded fails with the
// reason, instead of being released and resumed over and over.
func TestUnreadableRunFailsOnce(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, db dbRef) {
		c := fakestep.NewCounter()
		s := newService(t, db, planner(func() playbooks.PlannedStep { return fakestep.Step("a", vocab.TierMetrics, fakestep.OK(c, nil)) }), false)
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
		time.Sleep(3 * s.life.Config().LeaseTimeout) // long enough for a reaper to take it again, if it would
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
	forEachStore(t, func(t *testing.T, db dbRef) {
		n := &recNotifier{}
		c := fakestep.NewCounter()
		s := newService(t, db, planner(func() playbooks.PlannedStep { return fakestep.Step("a", vocab.TierMetrics, fakestep.OK(c, nil)) }), false,
			notifyTo(n))
		ctx := context.Background()
		acc := acceptOne(t, s, firing("between", time.Now()))
		// As a run released by a process that had recorded its parent message.
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.out.Append(ctx, tx, acc.RunID, outbox.Open{}); err != nil {
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
		n.eventually(t, "the cancellation", func() bool { return len(n.closes) > 0 })
		n.mu.Lock()
		closes := append([]notify.Summary(nil), n.closes...)
		n.mu.Unlock()
		if r.Status != vocab.StatusCancelled || len(closes) != 1 || closes[0].Status != vocab.StatusCancelled || c.Count(acc.RunID+"/a") != 0 {
			t.Fatalf("status %s, closes %+v, steps run %d", r.Status, closes, c.Count(acc.RunID+"/a"))
		}
	})
}

// TestReplicasStartingTogetherOnAFreshDatabase: several processes opening the
// same new PostgreSQL database at once all migrate it without failing.
func TestReplicasStartingTogetherOnAFreshDatabase(t *testing.T) {
	dsn := testenv.StartPostgres(t)
	const n = 4
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := Open(context.Background(), Options{Config: fastRuns(), DatabaseURL: dsn, Planner: planner(),
				Log: zaptest.NewLogger(t), Registerer: prometheus.NewRegistry()})
			if err == nil {
				s.Close()
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent first start: %v", err)
	}
}
