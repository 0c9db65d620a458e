package lifecycle

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/artifacts"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/runner/outbox"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vocab"
)

// keeperRuns answers what the artifacts' Keeper needs of the run lifecycle
// (artifacts.Runs).
type keeperRuns struct{ s *Runs }

// UploadsDone records the thread's reply that the run's spooled artifacts
// are all uploaded and, when the run is finished, asks for its manifest to
// be rewritten: the manifest, written while uploads were pending (they say
// "pending" there), is rewritten once tx commits. A run still running gets
// its manifest at the finish anyway.
func (r keeperRuns) UploadsDone(ctx context.Context, tx *sql.Tx, runID string, n int) error {
	s := r.s
	if err := s.out.Append(ctx, tx, runID, outbox.UploadsDone{N: n}); err != nil {
		return err
	}
	finishedAt, err := s.tables.Runs.FinishedAt(ctx, tx, runID)
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil // deleted by retention meanwhile
		}
		return fmt.Errorf("runner: uploads of %s: %w", runID, err)
	}
	if !finishedAt.Valid {
		return nil
	}
	return s.art.EnqueueManifestTx(ctx, tx, runID)
}

// ManifestOf is what run runID's manifest says of it (see
// artifacts.Runs): its row, its plans rebuilt, its records and verdicts.
func (r keeperRuns) ManifestOf(ctx context.Context, runID string) (artifacts.ManifestInput, bool, error) {
	s := r.s
	row, err := s.getRow(ctx, s.db, runID)
	if errors.Is(err, runs.ErrNotFound) {
		return artifacts.ManifestInput{}, false, nil
	} else if err != nil {
		return artifacts.ManifestInput{}, false, err
	}
	if !row.Status.Finished() {
		return artifacts.ManifestInput{}, false, nil // asked for by a finish that was not committed as such
	}
	if len(row.plans) == 0 {
		return artifacts.ManifestInput{}, false, nil // skipped before any playbook ran: nothing was captured
	}
	steps, err := s.loadSteps(ctx, s.db, runID)
	if err != nil {
		return artifacts.ManifestInput{}, false, err
	}
	verdicts, err := s.loadVerdicts(ctx, s.db, runID)
	if err != nil {
		return artifacts.ManifestInput{}, false, err
	}
	in := s.manifestInput(row, steps)
	in.Verdicts = verdicts
	return in, true, nil
}

// manifestInput is what the manifest says of r with its step records recs:
// its plans rebuilt from their stored source (for the rendered configs).
func (s *Runs) manifestInput(r *runRow, recs []executor.StepRecord) artifacts.ManifestInput {
	in := artifacts.ManifestInput{Alertname: r.Alertname, Verdict: r.Verdict, Records: recs,
		Run: artifacts.ManifestRun{ID: r.ID, Key: r.Key, Status: r.Status, Reason: r.Reason, CreatedAt: r.CreatedAt,
			StartedAt: r.StartedAt, FinishedAt: r.FinishedAt, ResolvedAt: r.ResolvedAt, Attempts: r.Attempts, Resumed: r.Resumed},
		Alert: artifacts.ManifestAlert{Fingerprint: r.Fingerprint, StartsAt: r.StartsAt, GeneratorURL: r.alert.GeneratorURL,
			Labels: r.received.Labels, Annotations: r.received.Annotations}}
	if r.window != nil {
		in.Run.WindowStart, in.Run.WindowEnd = &r.window.Start, &r.window.End
	}
	for _, sp := range r.plans {
		in.Plans = append(in.Plans, artifacts.ManifestPlan{Stored: sp, Planned: s.rebuiltSteps(r, sp)})
	}
	return in
}

// rebuiltSteps are the plan's steps with their rendered configs, rebuilt from
// the stored source the run ran; none when it cannot be rebuilt.
func (s *Runs) rebuiltSteps(r *runRow, sp playbooks.StoredPlan) []playbooks.PlannedStep {
	w := vocab.Window{}
	if r.window != nil {
		w = *r.window
	}
	p, err := s.planner.Rebuild(sp, r.received, w)
	if err != nil {
		s.log.Warn("Manifest: a run's plan cannot be rebuilt; its steps are listed without config.",
			zap.String("run", r.ID), zap.String("playbook", sp.Playbook), zap.Error(err))
		return nil
	}
	return p.Steps
}

// RunArtifact says whether key is one of run runID's artifacts: recorded by
// one of its steps, or its manifest. An unknown run is runs.ErrNotFound; the
// artifact route answers 404 for either, so no other key can be probed.
func (s *Runs) RunArtifact(ctx context.Context, runID, key string) (bool, error) {
	r, err := s.getRow(ctx, s.db, runID)
	if err != nil {
		return false, err
	}
	if key == storage.ManifestKey(r.CreatedAt, r.Alertname, r.ID) {
		return true, nil
	}
	steps, err := s.loadSteps(ctx, s.db, runID)
	if err != nil {
		return false, err
	}
	for _, st := range steps {
		for _, a := range st.Artifacts {
			if a.Key == key {
				return true, nil
			}
		}
	}
	return false, nil
}
