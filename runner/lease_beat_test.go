package runner

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/autocapture/autocapture/capture"
	"github.com/autocapture/autocapture/internal/fakestep"
	"github.com/autocapture/autocapture/internal/testenv"
	"github.com/autocapture/autocapture/playbooks"
)

// TestRenewalsDoNotWaitForABusyPool: every connection of the Service's main
// pool is taken (as its steps' writes, deliveries and River take them in a
// storm) for three leases. The renewals, on the heartbeat's own connection,
// keep the running run's lease: it is neither stopped by its watchdog nor
// resumed, and its step runs once. On one pool the renewals waited for a
// connection past their timeout and healthy runs on live replicas were
// stopped and resumed elsewhere (the chaos test: 74 in one run).
func TestRenewalsDoNotWaitForABusyPool(t *testing.T) {
	forEachStore(t, func(t *testing.T, db dbRef) {
		s, c, release, ids := heldRuns(t, db, "fp")
		id := ids[0]

		ctx := context.Background()
		pool := rawDB(s)
		var conns []*sql.Conn
		for range pool.Stats().MaxOpenConnections {
			cn, err := pool.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, cn)
		}
		released := false
		freePool := func() {
			if !released {
				released = true
				for _, cn := range conns {
					cn.Close()
				}
			}
		}
		defer freePool()
		if pool.Stats().InUse != len(conns) {
			t.Fatalf("took %d of the pool's connections, %d in use", len(conns), pool.Stats().InUse)
		}
		hold := 3 * s.cfg.LeaseTimeout
		time.Sleep(hold)

		// Read through a taken connection: the lease is still this
		// process's and runs beyond now on the database's clock.
		var owner string
		var left int64
		err := conns[0].QueryRowContext(ctx, s.dialect.sql(`SELECT owner, lease_until - {now} FROM autocapture_runs WHERE id = $1`), id).
			Scan(&owner, &left)
		if err != nil {
			t.Fatal(err)
		}
		if owner != s.id || left <= 0 {
			t.Errorf("after %v with the pool taken: run owner %q, lease %d ms ahead; want %q, ahead", hold, owner, left, s.id)
		}
		freePool()
		close(release)
		r := waitRun(t, s, id, "finished", isFinished)
		if r.Status != StatusSucceeded || r.Resumed != 0 || r.Attempts != 1 || c.Count(id+"/hold") != 1 {
			t.Errorf("run %s resumed %d, attempts %d, step ran %d times; want succeeded, never resumed, once",
				r.Status, r.Resumed, r.Attempts, c.Count(id+"/hold"))
		}
	})
}

// TestRenewalSkipsALockedRun: one run's row is locked by a transaction that
// outlasts the lease (a step's record stuck behind a slow write) while
// another run of the same process works on. The renewal skips the locked
// row instead of waiting for it: the other run keeps its lease and is never
// stopped; the locked one, whose lease could not be renewed, is stopped by
// its watchdog and resumed once. Waiting, one renewal statement for both
// runs held the other's renewal behind the lock and stopped both.
// PostgreSQL only: SQLite has no row locks (TestHungRenewalStopsTheRun
// holds its one write lock).
func TestRenewalSkipsALockedRun(t *testing.T) {
	db := dbRef{url: testenv.StartPostgres(t)}
	s, c, release, ids := heldRuns(t, db, "locked", "free")
	locked, free := ids[0], ids[1]

	ctx := context.Background()
	tx, err := rawDB(s).BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `SELECT id FROM autocapture_runs WHERE id = $1 FOR UPDATE`, locked); err != nil {
		t.Fatal(err)
	}
	hold := 2 * s.cfg.LeaseTimeout
	time.Sleep(hold)
	var left int64
	if err := rawDB(s).QueryRowContext(ctx, s.dialect.sql(`SELECT lease_until - {now} FROM autocapture_runs WHERE id = $1 AND owner = $2`),
		free, s.id).Scan(&left); err != nil || left <= 0 {
		t.Errorf("after %v with run %s locked: run %s lease %d ms ahead (%v); want still this process's, ahead", hold, locked, free, left, err)
	}
	tx.Rollback()
	close(release)
	r := waitRun(t, s, free, "finished", isFinished)
	if r.Status != StatusSucceeded || r.Resumed != 0 || c.Count(free+"/hold") != 1 {
		t.Errorf("the free run: %s, resumed %d, step ran %d times; want succeeded, never resumed, once", r.Status, r.Resumed, c.Count(free+"/hold"))
	}
	r = waitRun(t, s, locked, "finished", isFinished)
	if r.Status != StatusSucceeded || r.Resumed != 1 {
		t.Errorf("the locked run: %s, resumed %d; want succeeded after one resume (its lease could not be renewed for %v)", r.Status, r.Resumed, hold)
	}
}

// heldRuns starts a Service on db whose one step ("hold") blocks until
// release is closed, accepts an alert per fingerprint and waits until every
// run's step is running; the counter counts the step's starts.
func heldRuns(t *testing.T, db dbRef, fps ...string) (*Service, *fakestep.Counter, chan struct{}, []string) {
	t.Helper()
	c := fakestep.NewCounter()
	started, release := make(chan string, 2*len(fps)), make(chan struct{})
	s := newService(t, db, planner(func() playbooks.PlannedStep {
		return fakestep.Step("hold", capture.TierMetrics, fakestep.Block(c, started, release))
	}), true)
	var ids []string
	for _, fp := range fps {
		ids = append(ids, acceptOne(t, s, firing(fp, time.Now().UTC())).RunID)
	}
	for range fps {
		fakestep.WaitFor(t, started, "the runs' steps to start")
	}
	return s, c, release, ids
}
