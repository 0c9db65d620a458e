package runner

import (
	"context"
	"testing"

	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/runner/artifacts"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vocab"
)

// TestManifestWrittenAfterItsWriterDied: a replica killed while it wrote a
// run's manifest leaves the job running in River's table, which River's
// rescuer would give back only after RescueStuckJobsAfter (an hour). The
// reaper's manifest sweep asks for it again once the job has been running
// longer than a manifest takes: the next Service writes it within seconds.
// (Found by TestServeChaos: a run killed mid-manifest had none after 90 s.)
func TestManifestWrittenAfterItsWriterDied(t *testing.T) {
	forEachStore(t, func(t *testing.T, db dbRef) {
		st, _ := storage.NewLocal(t.TempDir())
		p, a, acc, _ := finishedUnwritten(t, db, st, "fp-m-dead")
		ctx := context.Background()
		// a's worker fetched the manifest job a minute ago and died writing.
		fetched := `datetime('now', 'subsec', '-60 seconds')`
		if dialectOf(a) == database.Postgres {
			fetched = `statement_timestamp() - interval '60 seconds'`
		}
		res, err := rawDB(a).ExecContext(ctx, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = `+fetched+`
			WHERE kind = $1`, artifacts.ManifestKind)
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			t.Fatalf("%d manifest jobs, want 1", n)
		}
		a.abandon()
		b := newService(t, db, p, true, withStore(st))
		r := waitManifest(t, b, acc.RunID)
		if m := manifestOf(t, st, r.Manifest); m.Run.Status != vocab.StatusSucceeded || m.Run.ID != acc.RunID {
			t.Fatalf("manifest after its writer died = %+v", m.Run)
		}
	})
}
