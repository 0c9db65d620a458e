package lifecycle

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// A replica killed while it executed runs leaves their River jobs in state
// running: nothing finishes them, and River's rescuer only takes them back
// after RescueStuckJobsAfter (an hour at least, see newRiver). That is by
// design: a run's liveness is the lease on its row, and the reaper resumes
// the run under a new job within lease_timeout; the old job, once its
// generation is superseded, does nothing when it runs again. The rows are
// counted, for operators who see them in river_job and wonder.

var descOrphanedJobs = prometheus.NewDesc("autocapture_river_jobs_orphaned",
	"River jobs a killed replica left in state running: older than runs.lease_timeout, their run no longer "+
		"leased at their generation. Harmless: the reaper has resumed their runs, and River's rescuer takes the "+
		"jobs back after an hour.", nil, nil)

// OrphanedRunJobs counts the River jobs of runs a gone replica left running
// (see descOrphanedJobs and database.Jobs.Orphaned): started more than
// lease_timeout ago, their run neither held by a live lease at their
// generation nor finished within lease_timeout.
func (s *Runs) OrphanedRunJobs(ctx context.Context) (int, error) {
	n, err := s.tables.Jobs.Orphaned(ctx, s.db, RunJob{}.Kind(), s.cfg.LeaseTimeout)
	if err != nil {
		return 0, fmt.Errorf("runner: orphaned river jobs: %w", err)
	}
	return n, nil
}

// orphanCollector reads autocapture_river_jobs_orphaned at scrape time. A
// store that does not answer leaves the series out of the scrape, as
// storeCollector does (autocapture_runs_store_up says the store is down).
type orphanCollector struct{ s *Runs }

func (c orphanCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descOrphanedJobs }

func (c orphanCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second) // a scrape has no context
	defer cancel()
	if n, err := c.s.OrphanedRunJobs(ctx); err == nil {
		ch <- prometheus.MustNewConstMetric(descOrphanedJobs, prometheus.GaugeValue, float64(n))
	}
}
