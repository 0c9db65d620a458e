package runner

import (
	"path/filepath"
	"testing"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestScrapeWhileStoreDown: with the run store unreachable (a PostgreSQL
// failover) a scrape still succeeds and says so: autocapture_runs_store_up
// 0, the series read from the store (runs, profile leases) left out, the
// process's own counters kept. An invalid metric from one collector used to
// fail the whole scrape, the gauge that says the store is down with it.
func TestScrapeWhileStoreDown(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := newService(t, testenv.DB{Path: filepath.Join(t.TempDir(), "a.db")}, planner(), false, func(o *Options) { o.Registerer = reg })
	if up := labelled(t, reg, "autocapture_runs_store_up", nil); up != 1 {
		t.Fatalf("autocapture_runs_store_up %v with the store up, want 1", up)
	}
	for _, name := range []string{"autocapture_profile_leases", "autocapture_river_jobs_orphaned"} {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n == 0 {
			t.Fatalf("%s series with the store up: %d (%v)", name, n, err)
		}
	}
	crash(s)
	if _, err := reg.Gather(); err != nil {
		t.Fatalf("scrape with the store down failed: %v", err)
	}
	if up := labelled(t, reg, "autocapture_runs_store_up", nil); up != 0 {
		t.Errorf("autocapture_runs_store_up %v with the store down, want 0", up)
	}
	for _, name := range []string{"autocapture_profile_leases", "autocapture_profiling_paused", "autocapture_runs", "autocapture_river_jobs_orphaned"} {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n != 0 {
			t.Errorf("%s: %d series (%v) with the store down, want none (nothing was read)", name, n, err)
		}
	}
	if n, err := testutil.GatherAndCount(reg, "autocapture_runs_finished_total"); err != nil || n == 0 {
		t.Errorf("the process's counters left the scrape with the store down: %d series (%v)", n, err)
	}
}
