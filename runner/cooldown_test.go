package runner

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/lifecycle"
	"github.com/autocapture/autocapture/vocab"
)

// TestCooldownRepeatIsSaidInTheHoldersThread: an alert that fires again
// inside a playbook's cooldown is skipped, and the thread of the run that
// holds the evidence gets one short reply saying when it fired and whose
// cooldown held it, however often the skip is recorded; the repeat is
// counted. Before, the webhook said accepted and no surface said more.
func TestCooldownRepeatIsSaidInTheHoldersThread(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		c := fakestep.NewCounter()
		n := &recNotifier{}
		// Two playbooks, each with its cooldown, both held by the first run.
		p := fakePlanner{Plans: func(template.Alert) []*playbooks.Plan {
			var out []*playbooks.Plan
			for _, name := range []string{"pb", "pb2"} {
				pl := plan(name, fakestep.Step("snap", vocab.TierMetrics, fakestep.OK(c, nil)))
				pl.Cooldown, pl.CooldownKey = 10*time.Minute, name+"/127.0.0.1:8000"
				out = append(out, pl)
			}
			return out
		}}
		reg := prometheus.NewRegistry()
		s := newService(t, db, p, true, notifyTo(n), func(o *Options) { o.Registerer = reg })
		first := acceptOne(t, s, firing("x", time.Now().UTC())).RunID
		waitRun(t, s, first, "finished", isFinished)
		n.eventually(t, "the first run's end", func() bool { return len(n.closes) > 0 })

		again := time.Date(2026, 12, 3, 3, 12, 5, 0, time.UTC)
		second := acceptOne(t, s, firing("y", again)).RunID
		if r := waitRun(t, s, second, "finished", isFinished); r.Status != vocab.StatusSkipped {
			t.Fatalf("second run %s (%s), want skipped by the cooldown", r.Status, r.Reason)
		}
		want := "fired again at 03:12:05 UTC (run " + second + "); within pb's 10m cooldown — evidence above"
		want2 := "fired again at 03:12:05 UTC (run " + second + "); within pb2's 10m cooldown — evidence above"
		n.eventually(t, "the repeat's replies, one per playbook", func() bool {
			var one, two bool
			for _, rep := range n.replies {
				one = one || rep.Notice == want && rep.RunID == first && rep.Key == cooldownKey(second, "pb")
				two = two || rep.Notice == want2 && rep.RunID == first && rep.Key == cooldownKey(second, "pb2")
			}
			return one && two
		})

		// The skip recorded again (a resumed run plans again): one reply still.
		// The run is worked again by hand, on a Service that has stopped
		// taking work (no reaper races the hand).
		ctx := context.Background()
		if err := s.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := s.db.ExecContext(ctx, `UPDATE autocapture_runs SET status = $1, finished_at = NULL, owner = NULL
			WHERE id = $2`, vocab.StatusQueued, second); err != nil {
			t.Fatal(err)
		}
		if err := s.life.Work(ctx, lifecycle.RunJob{RunID: second}); err != nil {
			t.Fatal(err)
		}
		if r, err := s.Get(ctx, second); err != nil || r.Status != vocab.StatusSkipped {
			t.Fatalf("replayed run: %v (%v), want skipped again", r, err)
		}
		// What the thread will show is what the outbox holds: one operation
		// per playbook, in the first run's thread, none for the replay.
		var ops, elsewhere int
		if err := s.db.QueryRowContext(context.Background(), `SELECT
			COUNT(*) FILTER (WHERE run_id = $2), COUNT(*) FILTER (WHERE run_id <> $2)
			FROM autocapture_outbox WHERE op_key LIKE $1`, "run/cooldown/"+second+"/%", first).Scan(&ops, &elsewhere); err != nil {
			t.Fatal(err)
		}
		if ops != 2 || elsewhere != 0 {
			t.Errorf("outbox: %d repeat replies in the first run's thread and %d elsewhere, want 2 (one per playbook) and 0", ops, elsewhere)
		}
		n.mu.Lock()
		opens := len(n.opens)
		n.mu.Unlock()
		if opens != 1 {
			t.Errorf("%d threads opened, want the first run's alone (a skipped run posts no thread)", opens)
		}
		if got := labelled(t, reg, "autocapture_cooldown_repeats_total", map[string]string{"playbook": "pb"}); got != 2 {
			t.Errorf("autocapture_cooldown_repeats_total{playbook=\"pb\"} = %v, want 2 (the skip and its replay count, as the help says)", got)
		}
		if c.Count(second+"/snap") != 0 || c.Count(first+"/snap") != 2 {
			t.Errorf("steps ran: first run %d, the repeat %d; want 2 (one per playbook) and 0", c.Count(first+"/snap"), c.Count(second+"/snap"))
		}
	})
}

// TestNotConfiguredIsOneWord: the step status the executor records is the
// one the notifiers (which do not import it) render grey.
func TestNotConfiguredIsOneWord(t *testing.T) {
	if vocab.StatusNotConfigured != vocab.StatusNotConfigured {
		t.Fatalf("vocab.StatusNotConfigured %q, vocab.StatusNotConfigured %q: one status, two spellings", vocab.StatusNotConfigured, vocab.StatusNotConfigured)
	}
}
