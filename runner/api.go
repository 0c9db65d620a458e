package runner

import (
	"context"

	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/runner/lifecycle"
	"github.com/autocapture/autocapture/runner/runs"
)

// What the daemon asks of the runs: each method forwards one call to the
// run lifecycle, which documents it.

// Accept is lifecycle.Runs.Accept.
func (s *Service) Accept(ctx context.Context, alerts []template.Alert) ([]runs.Accepted, error) {
	return s.life.Accept(ctx, alerts)
}

// Get is lifecycle.Runs.Get.
func (s *Service) Get(ctx context.Context, id string) (*runs.Run, error) { return s.life.Get(ctx, id) }

// List is lifecycle.Runs.List.
func (s *Service) List(ctx context.Context, q runs.ListQuery) (runs.Page, error) {
	return s.life.List(ctx, q)
}

// Cancel is lifecycle.Runs.Cancel.
func (s *Service) Cancel(ctx context.Context, id string) (*runs.Run, error) {
	return s.life.Cancel(ctx, id)
}

// Feedback is lifecycle.Runs.Feedback.
func (s *Service) Feedback(ctx context.Context, runID, verdict string, correct bool, user runs.User) error {
	return s.life.Feedback(ctx, runID, verdict, correct, user)
}

// RunArtifact is lifecycle.Runs.RunArtifact.
func (s *Service) RunArtifact(ctx context.Context, runID, key string) (bool, error) {
	return s.life.RunArtifact(ctx, runID, key)
}

// OutboxBacklog is lifecycle.Runs.OutboxBacklog.
func (s *Service) OutboxBacklog(ctx context.Context) (map[string]lifecycle.Backlog, error) {
	return s.life.OutboxBacklog(ctx)
}

// QueueStats is lifecycle.Runs.QueueStats.
func (s *Service) QueueStats(ctx context.Context) (lifecycle.QueueStats, error) {
	return s.life.QueueStats(ctx)
}

// OrphanedRunJobs is lifecycle.Runs.OrphanedRunJobs.
func (s *Service) OrphanedRunJobs(ctx context.Context) (int, error) {
	return s.life.OrphanedRunJobs(ctx)
}
