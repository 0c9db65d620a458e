package lifecycle

import (
	"context"
	"database/sql"
	"net/url"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/vocab"
)

// TestRenewalsDoNotWaitForABusyPool: every connection of the Service's main
// pool is taken (as its steps' writes, deliveries and River take them in a
// storm) for three leases. The renewals, on the heartbeat's own connection,
// keep the running run's lease: it is neither stopped by its watchdog nor
// resumed, and its step runs once. On one pool the renewals waited for a
// connection past their timeout and healthy runs on live replicas were
// stopped and resumed elsewhere (the chaos test: 74 in one run).
func TestRenewalsDoNotWaitForABusyPool(t *testing.T) {
	t.Parallel()
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		s, c, release, ids := heldRuns(t, db, []string{"fp"})
		id := ids[0]

		ctx := context.Background()
		pool := s.raw
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
		hold := 3 * s.Config().LeaseTimeout
		time.Sleep(hold)

		// Read through a taken connection: the lease is still this
		// process's and runs beyond now on the database's clock.
		var owner string
		var left int64
		err := conns[0].QueryRowContext(ctx, s.dialect.SQL(`SELECT owner, lease_until - {now} FROM autocapture_runs WHERE id = $1`), id).
			Scan(&owner, &left)
		if err != nil {
			t.Fatal(err)
		}
		if owner != s.Owner() || left <= 0 {
			t.Errorf("after %v with the pool taken: run owner %q, lease %d ms ahead; want %q, ahead", hold, owner, left, s.Owner())
		}
		freePool()
		close(release)
		r := waitRun(t, s, id, "finished", isFinished)
		if r.Status != vocab.StatusSucceeded || r.Resumed != 0 || r.Attempts != 1 || c.Count(id+"/hold") != 1 {
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
	t.Parallel()
	db := testenv.DB{URL: testenv.StartPostgres(t)}
	s, c, release, ids := heldRuns(t, db, []string{"locked", "free"})
	locked, free := ids[0], ids[1]

	ctx := context.Background()
	tx, err := s.raw.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `SELECT id FROM autocapture_runs WHERE id = $1 FOR UPDATE`, locked); err != nil {
		t.Fatal(err)
	}
	hold := 2 * s.Config().LeaseTimeout
	time.Sleep(hold)
	var left int64
	if err := s.raw.QueryRowContext(ctx, s.dialect.SQL(`SELECT lease_until - {now} FROM autocapture_runs WHERE id = $1 AND owner = $2`),
		free, s.Owner()).Scan(&left); err != nil || left <= 0 {
		t.Errorf("after %v with run %s locked: run %s lease %d ms ahead (%v); want still this process's, ahead", hold, locked, free, left, err)
	}
	tx.Rollback()
	close(release)
	r := waitRun(t, s, free, "finished", isFinished)
	if r.Status != vocab.StatusSucceeded || r.Resumed != 0 || c.Count(free+"/hold") != 1 {
		t.Errorf("the free run: %s, resumed %d, step ran %d times; want succeeded, never resumed, once", r.Status, r.Resumed, c.Count(free+"/hold"))
	}
	r = waitRun(t, s, locked, "finished", isFinished)
	if r.Status != vocab.StatusSucceeded || r.Resumed != 1 {
		t.Errorf("the locked run: %s, resumed %d; want succeeded after one resume (its lease could not be renewed for %v)", r.Status, r.Resumed, hold)
	}
}

// TestRenewalsSurviveSlowReconnects: the database drops every connection
// (a failover, a restart) and then takes longer to accept a new one than a
// renewal may wait (a loaded server forking and authenticating backends).
// The heartbeat's connections reopen in the background and the renewals
// after them go through: the run keeps its lease, is never stopped or
// resumed, and its step runs once. Over database/sql's own pool each
// renewal opened its connection against its own deadline, gave up
// mid-connect and began again at the next tick, and the watchdog stopped
// the healthy run (CI's HA run: 9 runs of a live replica resumed).
// PostgreSQL only: the embedded store has no connects.
func TestRenewalsSurviveSlowReconnects(t *testing.T) {
	t.Parallel()
	dsn := testenv.StartPostgres(t)
	p, proxied := throughProxy(t, dsn)
	// A lease of 4 s: renewals time out at 1.3 s, the watchdog stops the
	// run 3.9 s after the last renewal; a connect takes 2 s.
	lease := func(o *procOpts) { o.cfg.LeaseTimeout = 4 * time.Second }
	s, c, release, ids := heldRuns(t, testenv.DB{URL: proxied}, []string{"fp"}, lease)
	id := ids[0]
	slow := 2 * time.Second
	if margin := s.Config().LeaseTimeout - s.Config().HeartbeatInterval; s.RenewTimeout() >= slow || slow >= margin-time.Second {
		t.Fatalf("connects of %v must outlast a renewal's %v and leave the watchdog's %v a second", slow, s.RenewTimeout(), margin)
	}
	p.SlowConnects(slow)
	cut := p.Cut()
	before := p.Accepted()
	hold := 3 * s.Config().LeaseTimeout
	time.Sleep(hold)
	close(release)
	r := waitRun(t, s, id, "finished", isFinished)
	if r.Status != vocab.StatusSucceeded || r.Resumed != 0 || r.Attempts != 1 || c.Count(id+"/hold") != 1 {
		t.Errorf("after %d connections cut and %v with connects taking %v: run %s, resumed %d, attempts %d, step ran %d times; want succeeded, never resumed, once",
			cut, hold, slow, r.Status, r.Resumed, r.Attempts, c.Count(id+"/hold"))
	}
	t.Logf("%d connections cut; %d connects through the proxy over the %v that followed", cut, p.Accepted()-before, hold)
}

// heldRuns starts a Service on db whose one step ("hold") blocks until
// release is closed, accepts an alert per fingerprint and waits until every
// run's step is running; the counter counts the step's starts.
func heldRuns(t *testing.T, db testenv.DB, fps []string, opts ...procOpt) (*proc, *fakestep.Counter, chan struct{}, []string) {
	t.Helper()
	c := fakestep.NewCounter()
	started, release := make(chan string, 2*len(fps)), make(chan struct{})
	s := newProc(t, db, planner(func() playbooks.PlannedStep {
		return fakestep.Step("hold", vocab.TierMetrics, fakestep.Block(c, started, release))
	}), true, opts...)
	var ids []string
	for _, fp := range fps {
		ids = append(ids, acceptOne(t, s, firing(fp, time.Now().UTC())).RunID)
	}
	for range fps {
		fakestep.WaitFor(t, started, "the runs' steps to start")
	}
	return s, c, release, ids
}

// throughProxy starts a TCP proxy to dsn's server and returns it with the
// URL of dsn through it.
func throughProxy(t *testing.T, dsn string) (*testenv.TCPProxy, string) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p := testenv.StartTCPProxy(t, u.Host)
	u.Host = p.Addr
	return p, u.String()
}
