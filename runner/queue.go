package runner

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/runner/artifacts"
	"github.com/autocapture/autocapture/runner/lifecycle"
	"github.com/autocapture/autocapture/runner/outbox"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// newRiver builds the client over every part's workers (runs, deliveries,
// manifests, retention, uploads), with settings for runs that last minutes.
func newRiver(drv riverdriver.Driver[*sql.Tx], cfg config.Runs, owner string, log *zap.Logger,
	life *lifecycle.Runs, out *outbox.Outbox, art *artifacts.Keeper) (*river.Client[*sql.Tx], error) {
	workers := river.NewWorkers()
	if err := life.AddWorker(workers); err != nil {
		return nil, err
	}
	if err := out.AddWorker(workers); err != nil {
		return nil, err
	}
	if err := art.AddWorkers(workers); err != nil { // manifests, retention, late uploads
		return nil, err
	}
	poll := min(time.Second, cfg.HeartbeatInterval)
	queues := life.Queues()
	maps.Copy(queues, out.Queues()) // deliveries to notifiers (runner/outbox)
	// Manifests and retention on the housekeeping queue, late uploads on
	// this replica's own (runner/artifacts).
	maps.Copy(queues, art.Queues())
	c, err := river.NewClient(drv, &river.Config{
		ID:     owner,
		Queues: queues,
		// Retention's tick; River inserts periodic jobs on the elected
		// leader only (the profile sweeper ticks on every replica instead).
		PeriodicJobs: art.PeriodicJobs(),
		Workers:      workers,
		// Runs carry their own deadlines; liveness is the lease on the run row.
		JobTimeout: -1,
		// River's rescuer is only a late backstop: the reaper resumes a run
		// within lease_timeout of its owner's death.
		RescueStuckJobsAfter: max(time.Hour, 3*cfg.DefaultTimeout),
		MaxAttempts:          lifecycle.JobMaxAttempts,
		// SQLite and database/sql have no LISTEN/NOTIFY: poll.
		FetchPollInterval: poll,
		FetchCooldown:     min(100*time.Millisecond, poll),
		Logger:            slog.New(&zapHandler{log: log.Named("river")}),
	})
	if err != nil {
		return nil, fmt.Errorf("runner: river client: %w", err)
	}
	return c, nil
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
