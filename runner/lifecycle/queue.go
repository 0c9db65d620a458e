package lifecycle

import (
	"context"
	"fmt"
	"time"

	"github.com/riverqueue/river"
)

// queueRuns is the River queue runs are worked from.
const queueRuns = "autocapture_runs"

// JobMaxAttempts bounds River's retries of one job (the client's default for
// every part's jobs, see the runner's newRiver). A job fails only when the
// store cannot be reached to claim or finish its run; how often a RUN is
// started is counted on the run row (runs.max_attempts), not here.
const JobMaxAttempts = 5

// RunJob is the River job that executes a run. Generation changes each time
// the reaper resumes the run, so the new job is unique even while River still
// holds the dead owner's job as running.
type RunJob struct {
	RunID      string `json:"run_id"`
	Generation int    `json:"generation"`
}

// Kind names the job kind in River's table.
func (RunJob) Kind() string { return "autocapture_run" }

// InsertOpts puts runs on their queue, unique per run and generation.
func (RunJob) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: queueRuns, MaxAttempts: JobMaxAttempts,
		UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// runWorker hands River's jobs to the run lifecycle.
type runWorker struct {
	river.WorkerDefaults[RunJob]
	s *Runs
}

// Timeout disables River's per-job timeout: a run is bounded by its plans'
// own deadlines (runs.default_timeout), which River's 1-minute default would cut.
func (w *runWorker) Timeout(*river.Job[RunJob]) time.Duration { return -1 }

// Work claims and executes the run, or does nothing when it is finished or
// held by a live owner elsewhere.
func (w *runWorker) Work(ctx context.Context, job *river.Job[RunJob]) error {
	return w.s.work(ctx, job.Args)
}

// startRiver starts River's client, again while PostgreSQL is away during the
// start (within database.startup_wait, see startup). Start pings the
// database, initialises the driver, then starts its services and one
// producer per queue, each of which writes its river_queue row: any of those
// may meet the outage. A client whose Start failed may be started again: in
// River v0.51.2 a failed Start stops every service it had started
// (client.go, stopServicesOnError) and closes its stopped channel, and
// BaseStartStop.StartInit (rivershared/startstop/start_stop.go) then resets
// the client's state so the next Start runs afresh (CHANGELOG 0.33.0,
// PR #1187; River's Test_Client_Start/CanRestartAfterFailure).
//
// The client works under ctx without its cancel: Stop ends it, not a signal.
func (s *Runs) startRiver(ctx context.Context) error {
	return s.retry(ctx, "river start", func(context.Context) error {
		if err := s.client.Start(context.WithoutCancel(ctx)); err != nil {
			return fmt.Errorf("runner: start river: %w", err)
		}
		return nil
	})
}

// AddWorker registers the runs' River worker.
func (s *Runs) AddWorker(w *river.Workers) error {
	if err := river.AddWorkerSafely(w, &runWorker{s: s}); err != nil {
		return fmt.Errorf("runner: river worker: %w", err)
	}
	return nil
}

// Queues is the River queue runs are worked from: runs.max_concurrent at once
// in this process.
func (s *Runs) Queues() map[string]river.QueueConfig {
	return map[string]river.QueueConfig{queueRuns: {MaxWorkers: s.cfg.MaxConcurrent}}
}

// Work claims and executes the run of job, or does nothing when it is
// finished or held by a live owner elsewhere (the River worker's job; tests
// drive it by hand). It returns an error only when the store failed (River
// retries), or a snooze.
func (s *Runs) Work(ctx context.Context, job RunJob) error { return s.work(ctx, job) }
