package lifecycle

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/vocab"
)

// TestWindowEndsWhenTheAlertArrived: a run that waited for a worker (behind
// runs.max_concurrent) still asks about the moment its alert arrived: its
// window ends at its acceptance, not when it started.
func TestWindowEndsWhenTheAlertArrived(t *testing.T) {
	t.Parallel()
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		type seen struct {
			w       vocab.Window
			created time.Time
			at      time.Time
		}
		var mu sync.Mutex
		got := map[string]seen{}
		holding, release := make(chan struct{}), make(chan struct{})
		p := planner(func() playbooks.PlannedStep {
			return fakestep.Step("snap", vocab.TierMetrics, fakestep.Func(func(ctx context.Context, in *vocab.Input) (*vocab.Result, error) {
				mu.Lock()
				got[in.RunID] = seen{in.Window, in.RunCreated, time.Now()}
				first := len(got) == 1
				mu.Unlock()
				if first {
					close(holding)
					<-release // holds the only worker
				}
				return &vocab.Result{}, nil
			}))
		})
		s := newProc(t, db, p, true, func(o *procOpts) { o.cfg.MaxConcurrent = 1 })
		startsAt := time.Now().UTC().Add(-time.Minute)
		acc, err := s.Accept(context.Background(), []template.Alert{firing("fp0", startsAt), firing("fp1", startsAt)})
		if err != nil {
			t.Fatal(err)
		}
		// The other run waits behind the held worker for at least this long,
		// however late the worker got to the first one.
		fakestep.WaitFor(t, holding, "the first run to hold the only worker")
		time.Sleep(1500 * time.Millisecond)
		released := time.Now()
		close(release)
		for _, a := range acc {
			r := waitRun(t, s, a.RunID, "finished", isFinished)
			mu.Lock()
			g := got[r.ID]
			mu.Unlock()
			if !g.w.End.Equal(r.CreatedAt) || !g.created.Equal(r.CreatedAt) {
				t.Errorf("run %s: window ends %s (created %s), want its acceptance %s", r.ID, g.w.End, g.created, r.CreatedAt)
			}
			if want := r.StartsAt.Add(-fastRuns().Lookback); !g.w.Start.Equal(want) {
				t.Errorf("run %s: window starts %s, want startsAt - lookback %s", r.ID, g.w.Start, want)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		waited := 0
		for _, g := range got {
			if !g.at.Before(released) {
				waited++
				t.Logf("a run started %s after its acceptance, behind the held worker", g.at.Sub(g.created).Round(time.Millisecond))
			}
		}
		if waited != 1 {
			t.Errorf("%d runs started only once the worker was released, want 1 (the test's premise: one waited): %+v", waited, got)
		}
	})
}
