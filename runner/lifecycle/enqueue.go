package lifecycle

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/riverqueue/river"
)

// enqueueChunk bounds the runs of one job-id UPDATE (2 parameters each).
const enqueueChunk = 100

// Enqueue inserts a River job for each run (at its generation) and records the
// job's id on the run row (river_job_id), in tx: the run's new generation, its
// job and the job's id commit together or not at all, so a kill -9 anywhere
// in between leaves neither. The reaper finds a run's job by that id, the
// primary key of river_job (see abandoned). A duplicate insert (the same run
// and generation, already enqueued) answers the existing job, whose id it is.
func (s *Runs) Enqueue(ctx context.Context, tx *sql.Tx, jobs []RunJob) error {
	if len(jobs) == 0 {
		return nil
	}
	params := make([]river.InsertManyParams, len(jobs))
	for i, j := range jobs {
		params[i] = river.InsertManyParams{Args: j}
	}
	res, err := s.client.InsertManyTx(ctx, tx, params)
	if err != nil {
		return fmt.Errorf("enqueue %d runs: %w", len(jobs), err)
	}
	if len(res) != len(jobs) {
		return fmt.Errorf("enqueue %d runs: river answered %d jobs", len(jobs), len(res))
	}
	for len(jobs) > 0 {
		n := min(len(jobs), enqueueChunk)
		runIDs, jobIDs := make([]string, n), make([]int64, n)
		for i := range n {
			runIDs[i], jobIDs[i] = jobs[i].RunID, res[i].Job.ID
		}
		if err := s.tables.Runs.SetJobIDs(ctx, tx, runIDs, jobIDs); err != nil {
			return fmt.Errorf("enqueue %d runs: record job ids: %w", n, err)
		}
		jobs, res = jobs[n:], res[n:]
	}
	return nil
}
