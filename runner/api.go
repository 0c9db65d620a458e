package runner

import (
	"context"

	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/runner/lifecycle"
	"github.com/autocapture/autocapture/runner/runs"
)

// What the daemon asks of the runs, answered by the run lifecycle
// (lifecycle.Runs): each method forwards one call.

// Accept records a group of validated alerts in one transaction; any error
// means nothing was committed (lifecycle.Runs.Accept).
func (s *Service) Accept(ctx context.Context, alerts []template.Alert) ([]runs.Accepted, error) {
	return s.life.Accept(ctx, alerts)
}

// Get returns a run with its steps, verdict history and feedback, or
// runs.ErrNotFound.
func (s *Service) Get(ctx context.Context, id string) (*runs.Run, error) { return s.life.Get(ctx, id) }

// List returns runs newest first, a page at a time.
func (s *Service) List(ctx context.Context, q runs.ListQuery) (runs.Page, error) {
	return s.life.List(ctx, q)
}

// Cancel asks for a run to stop; runs.ErrFinished for a run that has ended.
func (s *Service) Cancel(ctx context.Context, id string) (*runs.Run, error) {
	return s.life.Cancel(ctx, id)
}

// Feedback records a reader's answer to a run's verdict
// (lifecycle.Runs.Feedback).
func (s *Service) Feedback(ctx context.Context, runID, verdict string, correct bool, user runs.User) error {
	return s.life.Feedback(ctx, runID, verdict, correct, user)
}

// RunArtifact says whether key is one of run runID's artifacts.
func (s *Service) RunArtifact(ctx context.Context, runID, key string) (bool, error) {
	return s.life.RunArtifact(ctx, runID, key)
}

// OutboxBacklog counts the undelivered thread operations by sink.
func (s *Service) OutboxBacklog(ctx context.Context) (map[string]lifecycle.Backlog, error) {
	return s.life.OutboxBacklog(ctx)
}

// QueueStats counts runs by status and measures the oldest queued run's wait.
func (s *Service) QueueStats(ctx context.Context) (lifecycle.QueueStats, error) {
	return s.life.QueueStats(ctx)
}

// OrphanedRunJobs counts the River jobs of runs a gone replica left running.
func (s *Service) OrphanedRunJobs(ctx context.Context) (int, error) {
	return s.life.OrphanedRunJobs(ctx)
}
