package runner

// The Service's own store and registry: how Open opens the database, and
// what the composition registers. The run lifecycle's behaviour is tested in
// runner/lifecycle.

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"
)

// TestServicePing: the Service answers /-/ready's ping while its store does.
func TestServicePing(t *testing.T) {
	s := newService(t, testenv.DB{Path: filepath.Join(t.TempDir(), "p.db")}, planner(), false)
	if err := s.Ping(context.Background()); err != nil {
		t.Fatalf("ping: %v", err)
	}
	crash(s)
	if err := s.Ping(context.Background()); err == nil {
		t.Fatal("ping of a store cut off succeeded")
	}
}

// TestAcceptCountsNoIntakeMetric: alert intake is counted once, by handlers'
// autocapture_alerts_total{outcome} (rejections included); the runner must not
// export a second counter of the same thing.
func TestAcceptCountsNoIntakeMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := newService(t, testenv.DB{Path: filepath.Join(t.TempDir(), "m.db")}, planner(), false,
		func(o *Options) { o.Registerer = reg })
	t0 := time.Now().UTC()
	acceptOne(t, s, firing("fp", t0))
	acceptOne(t, s, resolvedAlert("fp", t0, t0.Add(time.Minute)))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
		if strings.HasPrefix(mf.GetName(), "autocapture_alerts_") {
			t.Errorf("runner exports %s, a duplicate of handlers' autocapture_alerts_total", mf.GetName())
		}
	}
	if !slices.Contains(names, "autocapture_runs_queue_depth") {
		t.Fatalf("runner metrics not gathered at all: %v", names)
	}
}

// TestStoreCommitsDurably: Accept's 200 promises runs and jobs that survive a
// power loss, so SQLite syncs every commit (synchronous=FULL) and PostgreSQL
// sessions commit synchronously even where the server's default does not (as
// in testenv's cluster), unless the URL chooses a level itself.
func TestStoreCommitsDurably(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		s := newService(t, testenv.DB{Path: filepath.Join(t.TempDir(), "d.db")}, planner(), false)
		var level int
		if err := s.db.QueryRowContext(context.Background(), `PRAGMA synchronous`).Scan(&level); err != nil {
			t.Fatal(err)
		}
		if level != 2 {
			t.Fatalf("PRAGMA synchronous = %d, want 2 (FULL)", level)
		}
	})
	cases := []struct {
		name, query, want string
	}{
		{name: "server default off", want: "on"},
		{name: "chosen in the url", query: "&synchronous_commit=remote_write", want: "remote_write"},
	}
	for _, tc := range cases {
		t.Run("postgres/"+tc.name, func(t *testing.T) {
			u := testenv.StartPostgres(t)
			s := newService(t, testenv.DB{URL: u + tc.query}, planner(), false)
			var got string
			if err := s.db.QueryRowContext(context.Background(), `SHOW synchronous_commit`).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("synchronous_commit = %q, want %q", got, tc.want)
			}
		})
	}
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
