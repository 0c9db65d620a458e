package lifecycle

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/outbox"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vocab"
)

// TestSeamsReadTheRun: what the parts built around the runs read of a
// finished run through the Seams, and the artifact route's check, say what
// the store holds: the parent, a step's reply with its links and charts, the
// run's own artifacts and no others, and an unknown run is runs.ErrNotFound.
func TestSeamsReadTheRun(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		ctx := context.Background()
		chart := vocab.Artifact{Name: "kv.png", Key: "runs/x/kv.png", ContentType: "image/png", Size: 10}
		p := planner(func() playbooks.PlannedStep {
			return fakestep.Step("chart", vocab.TierMetrics, fakestep.Func(func(context.Context, *vocab.Input) (*vocab.Result, error) {
				return &vocab.Result{Summary: "charted", Artifacts: []vocab.Artifact{chart}}, nil
			}))
		})
		s := newProc(t, db, p, true)
		id := acceptOne(t, s, firing("fp-seams", time.Now().UTC())).RunID
		r := waitRun(t, s, id, "finished", isFinished)
		seams := s.Seams()

		info, err := seams.Thread.RunInfo(ctx, id, "C9", true)
		if err != nil || info.ID != id || info.Status != vocab.StatusRunning || !slices.Equal(info.Playbooks, []string{"pb"}) ||
			info.Channel != "C9" || !info.Retry || info.Alert.Fingerprint != "fp-seams" {
			t.Errorf("parent %+v (%v), want the run's, opened as running, on C9, a retry", info, err)
		}
		key := outbox.StepReply{Plan: "pb", Step: "chart"}.Key()
		rep, err := seams.Thread.StepReply(ctx, id, key, "pb", "chart", false)
		if err != nil || rep.Summary != "charted" || len(rep.Links) != 1 || rep.Links[0].Name != "kv.png" ||
			len(rep.Files) != 1 || rep.Files[0].Key != chart.Key {
			t.Errorf("step reply %+v (%v), want its link and its chart as a file", rep, err)
		}
		for _, tc := range []struct {
			key  string
			want bool
		}{
			{chart.Key, true},
			{storage.ManifestKey(r.CreatedAt, r.Alertname, r.ID), true},
			{"runs/x/other.png", false},
		} {
			if got, err := s.RunArtifact(ctx, id, tc.key); err != nil || got != tc.want {
				t.Errorf("RunArtifact(%s) = %v (%v), want %v", tc.key, got, err, tc.want)
			}
		}
		if _, err := s.RunArtifact(ctx, "nope", chart.Key); !errors.Is(err, runs.ErrNotFound) {
			t.Errorf("RunArtifact of an unknown run: %v, want ErrNotFound", err)
		}
		if err := seams.Plane.CheckRun(ctx, id); err != nil {
			t.Errorf("CheckRun of a run: %v", err)
		}
		if err := seams.Plane.CheckRun(ctx, "nope"); !errors.Is(err, runs.ErrNotFound) {
			t.Errorf("CheckRun of an unknown run: %v, want ErrNotFound", err)
		}
		if g, err := seams.Grouper.Run(ctx, id); err != nil || len(g.Steps) != 1 || g.Steps[0].ID != "chart" {
			t.Errorf("the grouper's run %+v (%v), want it with its step", g, err)
		}
	})
}

// TestUploadsDoneAsksForTheManifestOfAFinishedRun: the Keeper's last upload
// of a finished run records the thread's reply and asks for the manifest
// again, in its transaction; a run still running gets only the reply (its
// finish writes the manifest).
func TestUploadsDoneAsksForTheManifestOfAFinishedRun(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		ctx := context.Background()
		s := newProc(t, db, planner(), false)
		done := acceptOne(t, s, firing("done", time.Now().UTC())).RunID
		running := acceptOne(t, s, firing("running", time.Now().UTC())).RunID
		if _, err := s.db.ExecContext(ctx, `UPDATE autocapture_runs SET status = $1, finished_at = 1 WHERE id = $2`, vocab.StatusSucceeded, done); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{done, running} {
			tx, err := s.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Seams().Keeper.UploadsDone(ctx, tx, id, 2); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		uploads := outbox.UploadsDone{N: 2}.Key()
		if s.out.count(t, done, uploads) != 1 || s.out.count(t, done, "manifest") != 1 {
			t.Errorf("finished run's thread %v, want the uploads' reply and the manifest asked for", s.out.ops(t, done))
		}
		if s.out.count(t, running, uploads) != 1 || s.out.count(t, running, "manifest") != 0 {
			t.Errorf("running run's thread %v, want the uploads' reply only", s.out.ops(t, running))
		}
	})
}

// TestResumeClaimerWaitsForALease: a resume's reply waits for the replica
// that claims the run (outbox.NotYetError), but not past a lease: a run no
// replica has room for must not hold its thread.
func TestResumeClaimerWaitsForALease(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		ctx := context.Background()
		s := newProc(t, db, planner(), false)
		id := acceptOne(t, s, firing("resumed", time.Now().UTC())).RunID
		var notYet outbox.NotYetError
		if _, err := s.Seams().Thread.ResumeClaimer(ctx, id); !errors.As(err, &notYet) || notYet.Wait != s.Config().HeartbeatInterval {
			t.Fatalf("claimer of a run queued now: %v, want to wait a heartbeat", err)
		}
		if _, err := s.db.ExecContext(ctx, `UPDATE autocapture_runs SET queued_at = 0 WHERE id = $1`, id); err != nil {
			t.Fatal(err)
		}
		if owner, err := s.Seams().Thread.ResumeClaimer(ctx, id); err != nil || owner != "" {
			t.Fatalf("claimer of a run queued for over a lease: %q, %v; want none", owner, err)
		}
		if _, err := s.Seams().Thread.ResumeClaimer(ctx, "nope"); err == nil {
			t.Fatal("claimer of an unknown run: no error")
		}
	})
}
