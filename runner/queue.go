package runner

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// queueRuns is the River queue runs are worked from.
const queueRuns = "autocapture_runs"

// jobMaxAttempts bounds River's retries of one job. A job fails only when the
// store cannot be reached to claim or finish its run; how often a RUN is
// started is counted on the run row (runs.max_attempts), not here.
const jobMaxAttempts = 5

// runArgs is the job that executes a run. Generation changes each time the
// reaper resumes the run, so the new job is unique even while River still holds
// the dead owner's job as running.
type runArgs struct {
	RunID      string `json:"run_id"`
	Generation int    `json:"generation"`
}

// Kind names the job kind in River's table.
func (runArgs) Kind() string { return "autocapture_run" }

// InsertOpts puts runs on their queue, unique per run and generation.
func (runArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: queueRuns, MaxAttempts: jobMaxAttempts,
		UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// runWorker hands River's jobs to the run lifecycle.
type runWorker struct {
	river.WorkerDefaults[runArgs]
	s *lifecycle
}

// Timeout disables River's per-job timeout: a run is bounded by its plans'
// own deadlines (runs.default_timeout), which River's 1-minute default would cut.
func (w *runWorker) Timeout(*river.Job[runArgs]) time.Duration { return -1 }

// Work claims and executes the run, or does nothing when it is finished or
// held by a live owner elsewhere.
func (w *runWorker) Work(ctx context.Context, job *river.Job[runArgs]) error {
	return w.s.work(ctx, job.Args)
}

// newRiver builds the client over every part's workers (runs, deliveries,
// manifests, retention, uploads), with settings for runs that last minutes.
func newRiver(drv riverdriver.Driver[*sql.Tx], s *lifecycle) (*river.Client[*sql.Tx], error) {
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, &runWorker{s: s}); err != nil {
		return nil, fmt.Errorf("runner: river worker: %w", err)
	}
	if err := s.out.AddWorker(workers); err != nil {
		return nil, err
	}
	if err := s.art.AddWorkers(workers); err != nil { // manifests, retention, late uploads
		return nil, err
	}
	poll := min(time.Second, s.cfg.HeartbeatInterval)
	queues := map[string]river.QueueConfig{queueRuns: {MaxWorkers: s.cfg.MaxConcurrent}}
	maps.Copy(queues, s.out.Queues()) // deliveries to notifiers (runner/outbox)
	// Manifests and retention on the housekeeping queue, late uploads on
	// this replica's own (runner/artifacts).
	maps.Copy(queues, s.art.Queues())
	c, err := river.NewClient(drv, &river.Config{
		ID:     s.id,
		Queues: queues,
		// Retention's tick; River inserts periodic jobs on the elected
		// leader only (the profile sweeper ticks on every replica instead).
		PeriodicJobs: s.art.PeriodicJobs(),
		Workers:      workers,
		// Runs carry their own deadlines; liveness is the lease on the run row.
		JobTimeout: -1,
		// River's rescuer is only a late backstop: the reaper resumes a run
		// within lease_timeout of its owner's death.
		RescueStuckJobsAfter: max(time.Hour, 3*s.cfg.DefaultTimeout),
		MaxAttempts:          jobMaxAttempts,
		// SQLite and database/sql have no LISTEN/NOTIFY: poll.
		FetchPollInterval: poll,
		FetchCooldown:     min(100*time.Millisecond, poll),
		Logger:            slog.New(&zapHandler{log: s.log.Named("river")}),
	})
	if err != nil {
		return nil, fmt.Errorf("runner: river client: %w", err)
	}
	return c, nil
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
func (s *lifecycle) startRiver(ctx context.Context) error {
	return s.retry(ctx, "river start", func(context.Context) error {
		if err := s.client.Start(context.WithoutCancel(ctx)); err != nil {
			return fmt.Errorf("runner: start river: %w", err)
		}
		return nil
	})
}

// zapHandler forwards River's slog records at warn and above to zap.
type zapHandler struct {
	log   *zap.Logger
	attrs []zap.Field
}

func (h *zapHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h *zapHandler) Handle(_ context.Context, r slog.Record) error {
	fields := append([]zap.Field{}, h.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		fields = append(fields, zap.Any(a.Key, a.Value.Any()))
		return true
	})
	lvl := zapcore.WarnLevel
	if r.Level >= slog.LevelError {
		lvl = zapcore.ErrorLevel
	}
	h.log.Log(lvl, r.Message, fields...)
	return nil
}

func (h *zapHandler) WithAttrs(as []slog.Attr) slog.Handler {
	n := &zapHandler{log: h.log, attrs: append([]zap.Field{}, h.attrs...)}
	for _, a := range as {
		n.attrs = append(n.attrs, zap.Any(a.Key, a.Value.Any()))
	}
	return n
}

func (h *zapHandler) WithGroup(name string) slog.Handler {
	return &zapHandler{log: h.log.Named(name), attrs: h.attrs}
}
