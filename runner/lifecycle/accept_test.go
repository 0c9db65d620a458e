package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

func TestAcceptOneRunPerEpisode(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		s := newProc(t, db, planner(), false) // not started: runs stay queued
		t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
		a := firing("fp1", t0)

		// 100 concurrent deliveries of the same firing: one run.
		const n = 100
		var wg sync.WaitGroup
		results := make([]runs.Accepted, n)
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				acc, err := s.Accept(context.Background(), []template.Alert{a})
				if err == nil {
					results[i] = acc[0]
				}
				errs[i] = err
			}()
		}
		wg.Wait()
		accepted := 0
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("delivery %d: %v", i, errs[i])
			}
			if results[i].RunID != results[0].RunID {
				t.Fatalf("delivery %d went to run %s, delivery 0 to %s", i, results[i].RunID, results[0].RunID)
			}
			if results[i].Outcome == runs.OutcomeAccepted {
				accepted++
			}
		}
		if accepted != 1 {
			t.Fatalf("%d deliveries created a run, want exactly 1", accepted)
		}
		first := results[0].RunID
		steps := []struct {
			name    string
			alert   template.Alert
			outcome runs.Outcome
			sameRun bool
		}{
			{"later startsAt while unresolved is the same run", firing("fp1", t0.Add(90*time.Second)), runs.OutcomeDeduplicated, true},
			{"resolution sets resolved_at", resolvedAlert("fp1", t0, t0.Add(5*time.Minute)), runs.OutcomeResolved, true},
			{"resolution repeated", resolvedAlert("fp1", t0, t0.Add(5*time.Minute)), runs.OutcomeResolved, true},
			{"late repeat of the resolved firing", firing("fp1", t0), runs.OutcomeDeduplicated, true},
			{"new startsAt after resolution is a new run", firing("fp1", t0.Add(time.Hour)), runs.OutcomeAccepted, false},
			{"resolved with no run", resolvedAlert("nobody", t0, t0.Add(time.Minute)), runs.OutcomeResolvedUnknown, false},
		}
		for _, st := range steps {
			acc := acceptOne(t, s, st.alert)
			if acc.Outcome != st.outcome || (acc.RunID == first) != st.sameRun {
				t.Fatalf("%s: got %s run %s (first run %s)", st.name, acc.Outcome, acc.RunID, first)
			}
		}
		r, err := s.Get(context.Background(), first)
		if err != nil {
			t.Fatal(err)
		}
		if r.ResolvedAt == nil || !r.ResolvedAt.Equal(t0.Add(5*time.Minute)) || r.Status != vocab.StatusQueued {
			t.Fatalf("first run resolved_at=%v status=%s, want endsAt and still queued", r.ResolvedAt, r.Status)
		}
		page, err := s.List(context.Background(), runs.ListQuery{Alertname: "VLLMSlowTTFT"})
		if err != nil || len(page.Runs) != 2 {
			t.Fatalf("list: %d runs, %v; want 2", len(page.Runs), err)
		}
	})
}

func TestAcceptBatchIsOneTransaction(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		s := newProc(t, db, planner(), false)
		t0 := time.Now().UTC()
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // the store cannot be reached in time: nothing may be committed
		if _, err := s.Accept(ctx, []template.Alert{firing("a", t0), firing("b", t0)}); err == nil {
			t.Fatal("accept with a dead context succeeded")
		}
		page, err := s.List(context.Background(), runs.ListQuery{})
		if err != nil || len(page.Runs) != 0 {
			t.Fatalf("after a failed accept: %d runs (%v), want 0", len(page.Runs), err)
		}
		acc, err := s.Accept(context.Background(), []template.Alert{firing("a", t0), firing("b", t0), firing("a", t0)})
		if err != nil {
			t.Fatal(err)
		}
		if acc[0].Outcome != runs.OutcomeAccepted || acc[1].Outcome != runs.OutcomeAccepted || acc[2].Outcome != runs.OutcomeDeduplicated ||
			acc[2].RunID != acc[0].RunID {
			t.Fatalf("batch outcomes %+v", acc)
		}
	})
}

func TestListGetCancelAPI(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		s := newProc(t, db, planner(), false)
		t0 := time.Now().UTC()
		var ids []string
		for _, fp := range []string{"a", "b", "c", "d", "e"} {
			ids = append(ids, acceptOne(t, s, firing(fp, t0)).RunID)
		}
		ctx := context.Background()
		var seen []string
		cursor := ""
		for {
			page, err := s.List(ctx, runs.ListQuery{Limit: 2, Cursor: cursor})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range page.Runs {
				seen = append(seen, r.ID)
			}
			if cursor = page.Next; cursor == "" {
				break
			}
		}
		if len(seen) != 5 || seen[0] != ids[4] || seen[4] != ids[0] {
			t.Fatalf("paged list %v, want all 5 newest first (%v)", seen, ids)
		}
		if _, err := s.List(ctx, runs.ListQuery{Cursor: "%%%"}); !errors.Is(err, runs.ErrBadCursor) {
			t.Fatalf("bad cursor: %v", err)
		}
		if _, err := s.Get(ctx, "nope"); !errors.Is(err, runs.ErrNotFound) {
			t.Fatalf("get unknown: %v", err)
		}
		r, err := s.Cancel(ctx, ids[0])
		if err != nil || r.Status != vocab.StatusCancelled || r.CancelRequestedAt == nil {
			t.Fatalf("cancel queued run: %+v, %v", r, err)
		}
		if _, err := s.Cancel(ctx, ids[0]); !errors.Is(err, runs.ErrFinished) {
			t.Fatalf("cancel twice: %v, want ErrFinished", err)
		}
		if _, err := s.Cancel(ctx, "nope"); !errors.Is(err, runs.ErrNotFound) {
			t.Fatalf("cancel unknown: %v", err)
		}
		page, err := s.List(ctx, runs.ListQuery{Status: vocab.StatusCancelled})
		if err != nil || len(page.Runs) != 1 || page.Runs[0].ID != ids[0] {
			t.Fatalf("list by status: %+v, %v", page.Runs, err)
		}
	})
}

// TestAcceptGroupsOfAlerts: one group (one webhook) is inserted together; the
// unique indexes still make one run per episode within the group, and a group
// that ends one episode and starts the next closes the old run first.
func TestAcceptGroupsOfAlerts(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		s := newProc(t, db, planner(), false)
		ctx := context.Background()
		t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
		outcomes := func(acc []runs.Accepted) string {
			var o []string
			for _, a := range acc {
				o = append(o, string(a.Outcome))
			}
			return strings.Join(o, ",")
		}

		// 150 distinct alerts (two insert chunks), one of them twice, and one
		// fingerprint with a second startsAt.
		var group []template.Alert
		for i := range 150 {
			group = append(group, firing(fmt.Sprintf("g%03d", i), t0))
		}
		group = append(group, firing("g007", t0), firing("g008", t0.Add(time.Minute)))
		acc, err := s.Accept(ctx, group)
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]bool{}
		for i, a := range acc[:150] {
			if a.Outcome != runs.OutcomeAccepted || a.Fingerprint != group[i].Fingerprint || ids[a.RunID] {
				t.Fatalf("alert %d: %+v", i, a)
			}
			ids[a.RunID] = true
		}
		if acc[150].Outcome != runs.OutcomeDeduplicated || acc[150].RunID != acc[7].RunID ||
			acc[151].Outcome != runs.OutcomeDeduplicated || acc[151].RunID != acc[8].RunID {
			t.Fatalf("repeats in one group: %+v %+v", acc[150], acc[151])
		}

		// End of g001's episode and start of its next one, in one group, in the
		// order a sender might put them.
		next := firing("g001", t0.Add(time.Hour))
		end := firing("g001", t0)
		end.Status, end.EndsAt = "resolved", t0.Add(30*time.Minute)
		acc, err = s.Accept(ctx, []template.Alert{next, end})
		if err != nil {
			t.Fatal(err)
		}
		if outcomes(acc) != "accepted,resolved" || acc[1].RunID == acc[0].RunID {
			t.Fatalf("next episode: %+v", acc)
		}
	})
}

// TestAcceptSameAlertsInOtherOrdersDoNotDeadlock: two groups carrying the same
// alerts in opposite orders, at once, many times: every delivery succeeds (on
// PostgreSQL, row locks taken in body order used to deadlock).
func TestAcceptSameAlertsInOtherOrdersDoNotDeadlock(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		s := newProc(t, db, planner(), false)
		t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
		for round := range 10 {
			var fwd, rev []template.Alert
			for i := range 30 {
				fwd = append(fwd, firing(fmt.Sprintf("r%d-%02d", round, i), t0))
			}
			for i := len(fwd) - 1; i >= 0; i-- {
				rev = append(rev, fwd[i])
			}
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for k, group := range [][]template.Alert{fwd, rev} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, errs[k] = s.Accept(context.Background(), group)
				}()
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	})
}

// TestAcceptAfterALostResolution: a run that finished and never heard its
// resolution must not swallow the alert's next episode. Repeats and startsAt
// shifts of the same episode still join it.
func TestAcceptAfterALostResolution(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		s := newProc(t, db, planner(), false)
		t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
		first := acceptOne(t, s, firing("lost", t0))
		// The run finished at 10:05; no resolution ever arrives.
		if _, err := s.db.ExecContext(context.Background(), `UPDATE autocapture_runs SET status = $1, finished_at = $2 WHERE id = $3`,
			vocab.StatusSucceeded, t0.Add(5*time.Minute).UnixMilli(), first.RunID); err != nil {
			t.Fatal(err)
		}
		for name, startsAt := range map[string]time.Time{
			"repeat of the episode":            t0,
			"startsAt shifted before it ended": t0.Add(30 * time.Second),
		} {
			if acc := acceptOne(t, s, firing("lost", startsAt)); acc.Outcome != runs.OutcomeDeduplicated || acc.RunID != first.RunID {
				t.Fatalf("%s: %+v, want the first run", name, acc)
			}
		}
		next := acceptOne(t, s, firing("lost", t0.Add(3*time.Hour)))
		if next.Outcome != runs.OutcomeAccepted || next.RunID == first.RunID {
			t.Fatalf("next episode: %+v, want a new run", next)
		}
		old, err := s.Get(context.Background(), first.RunID)
		if err != nil {
			t.Fatal(err)
		}
		if old.ResolvedAt == nil || !old.ResolvedAt.Equal(t0.Add(3*time.Hour)) {
			t.Fatalf("old run resolved_at %v, want the new episode's start", old.ResolvedAt)
		}
		if again := acceptOne(t, s, firing("lost", t0.Add(3*time.Hour))); again.RunID != next.RunID {
			t.Fatalf("repeat of the new episode: %+v", again)
		}
	})
}
