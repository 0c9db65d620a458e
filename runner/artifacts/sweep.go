package artifacts

import (
	"context"
	"fmt"
	"time"

	"github.com/riverqueue/river"
)

// manifestStuckAfter is how long a manifest job may be running before the
// sweeper takes it for orphaned (its worker's process died mid-write) and
// asks for the manifest again; at least twice runs.lease_timeout. Writing a
// manifest is a few Stats and one small Put; River's own rescuer would wait
// an hour (RescueStuckJobsAfter, set for runs). A live but slow writer gets a
// second job beside it, which is harmless: writers follow manifest_seq and
// the last Put is of the latest state.
const manifestStuckAfter = 30 * time.Second

// SweepManifests enqueues a new manifest job for every run whose manifest
// jobs are all running since before manifestStuckAfter (and none waits to
// run): a replica killed while it wrote a manifest leaves its job running
// until River's rescuer, an hour later. It runs on the reaper's tick on every
// replica (leaseTimeout is runs.lease_timeout); two replicas may both enqueue
// one, which is harmless (see above).
func (k *Keeper) SweepManifests(ctx context.Context, leaseTimeout time.Duration) (int, error) {
	stuck := max(manifestStuckAfter, 2*leaseTimeout)
	runIDs, err := k.tables.Jobs.Stuck(ctx, k.db(), manifestArgs{}.Kind(), stuck)
	if err != nil {
		return 0, fmt.Errorf("runner: manifest sweep: %w", err)
	}
	var jobs []river.InsertManyParams
	for _, id := range runIDs {
		jobs = append(jobs, river.InsertManyParams{Args: manifestArgs{RunID: id}})
	}
	if len(jobs) == 0 {
		return 0, nil
	}
	if _, err := k.client().InsertMany(ctx, jobs); err != nil {
		return 0, fmt.Errorf("runner: manifest sweep: enqueue: %w", err)
	}
	return len(jobs), nil
}
