package runner

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vocab"
)

// TestServiceRunsRetention: Options.Retention reaches the artifacts' Keeper
// and its periodic job River's leader: a finished run aged past
// retention.runs is deleted with its objects, without a direct call. (What
// retention deletes and keeps: runner/artifacts' tests.)
func TestServiceRunsRetention(t *testing.T) {
	db := testenv.DB{Path: filepath.Join(t.TempDir(), "autocapture.db")}
	st, _ := storage.NewLocal(t.TempDir())
	p := planner(func() playbooks.PlannedStep {
		return fakestep.Step("grab", vocab.TierMetrics, artifactStep("evidence\n"))
	})
	first := newService(t, db, p, true, withStore(st)) // keeps runs for ever
	id := acceptOne(t, first, firing("fp-old", time.Now().Add(-time.Minute))).RunID
	r := waitManifest(t, first, id)
	back := (40 * 24 * time.Hour).Milliseconds()
	if _, err := rawDB(first).ExecContext(context.Background(), `UPDATE autocapture_runs SET finished_at = finished_at - $1
		WHERE id = $2`, back, id); err != nil {
		t.Fatal(err)
	}
	first.Close()
	month := config.Age(30 * 24 * time.Hour)
	s := newService(t, db, p, true, withStore(st), func(o *Options) {
		o.Retention = config.Retention{Runs: month, Artifacts: config.RetainArtifactsDelete, Interval: time.Hour}
	})
	waitFor(t, "the periodic job to delete the old run", func() bool {
		_, err := s.Get(context.Background(), id)
		return errors.Is(err, runs.ErrNotFound)
	})
	var left []string
	if err := st.List(context.Background(), storage.RunPrefix(r.CreatedAt, r.Alertname, r.ID), func(e vocab.ListEntry) error {
		left = append(left, e.Key)
		return nil
	}); err != nil || len(left) != 0 {
		t.Errorf("the deleted run left objects %v (%v)", left, err)
	}
}
