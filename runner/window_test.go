package runner

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/vocab"
)

// TestWindowEndsWhenTheAlertArrived: a run that waited for a worker (behind
// runs.max_concurrent) still asks about the moment its alert arrived: its
// window ends at its acceptance, not when it started.
func TestWindowEndsWhenTheAlertArrived(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, db dbRef) {
		type seen struct {
			w       vocab.Window
			created time.Time
			at      time.Time
		}
		var mu sync.Mutex
		got := map[string]seen{}
		release := make(chan struct{})
		p := planner(func() playbooks.PlannedStep {
			return fakestep.Step("snap", vocab.TierMetrics, fakestep.Func(func(ctx context.Context, in *vocab.Input) (*vocab.Result, error) {
				mu.Lock()
				got[in.RunID] = seen{in.Window, in.RunCreated, time.Now()}
				first := len(got) == 1
				mu.Unlock()
				if first {
					<-release // holds the only worker
				}
				return &vocab.Result{}, nil
			}))
		})
		s := newService(t, db, p, true, func(o *Options) { o.Config.MaxConcurrent = 1 })
		startsAt := time.Now().UTC().Add(-time.Minute)
		acc, err := s.Accept(context.Background(), []template.Alert{firing("fp0", startsAt), firing("fp1", startsAt)})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond)
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
			if g.at.Sub(g.created) >= time.Second {
				waited++
			}
		}
		if waited != 1 {
			t.Errorf("%d runs waited a second for the worker, want 1 (the test's premise): %+v", waited, got)
		}
	})
}
