package profiling

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/vocab"
)

// TestRunProfileIsOneMoment: GET /api/v1/runs/{id}/profile reads the lease
// and the events of one moment while the sweeper commits a state and its
// event together. A writer flips the run's lease between stopping and
// stopped, each with its event in one transaction, while RunProfile is read
// over and over: every read's lease state is its last event. (Read apart, on
// PostgreSQL the lease came from before a commit and the events from after
// it: "stopped" in the events beside a lease still stopping, which an
// operator, or a test waiting on that event, took for the sweeper's answer.)
func TestRunProfileIsOneMoment(t *testing.T) {
	t.Parallel()
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		const reads = 100
		ctx := context.Background()
		pl := newPlane(t, db, false)
		writer := newPlane(t, db, false)
		id := insertRun(t, pl, "a11ce0000000beef")
		target := "http://10.0.0.9:8000"
		mustAcquire(t, pl, req(target, id, "profile"))

		done := make(chan struct{})
		var wg sync.WaitGroup
		var commits atomic.Int64
		wg.Add(1)
		go func() {
			defer wg.Done()
			states := []string{vocab.LeaseStopping, vocab.LeaseStopped}
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				if err := flipLease(ctx, writer, id, target, states[i%2]); err != nil {
					t.Errorf("writer: %v", err)
					return
				}
				commits.Add(1)
			}
		}()

		waitFor(t, "the writer's first commit", func() bool { return commits.Load() > 0 })
		before := commits.Load()
		mixed := 0
		for range reads {
			p, err := pl.RunProfile(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			last := p.Events[len(p.Events)-1].Event
			if p.Lease == nil || p.Lease.State != last {
				mixed++
				if mixed == 1 {
					t.Errorf("the lease is %+v beside a last event %q: two moments in one read", p.Lease, last)
				}
			}
		}
		during := commits.Load() - before
		close(done)
		wg.Wait()
		t.Logf("%d reads beside %d commits: %d mixed two moments", reads, during, mixed)
		if during == 0 {
			t.Errorf("the writer committed nothing during the reads: nothing was checked")
		}
	})
}

// flipLease sets the lease's state and records the matching event in one
// transaction, as the sweeper records an answered stop.
func flipLease(ctx context.Context, pl *Plane, runID, target, state string) error {
	tx, err := pl.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE autocapture_profile_leases SET state = $1 WHERE target = $2`, state, target); err != nil {
		return err
	}
	if err := pl.profileEvent(ctx, tx, runID, target, "test", state, ""); err != nil {
		return err
	}
	return tx.Commit()
}
