package runner

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/vocab"
)

// labelled reads one series of a gauge or counter family from reg, -1 when
// the series is not gathered.
func labelled(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue series
				}
			}
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	return -1
}

// TestOutboxBacklogMetrics: while the notifier answers nothing, the run's
// whole thread waits in the outbox and autocapture_outbox_pending says how
// many operations, autocapture_outbox_oldest_age_seconds for how long; once
// the notifier answers, both drop to zero. The failure and final-status
// counters exist at zero before anything fails, so rate() sees the first one.
func TestOutboxBacklogMetrics(t *testing.T) {
	t.Parallel()
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		reg := prometheus.NewRegistry()
		f := newFarSide()
		f.gate = make(chan struct{})
		s := newService(t, db, threeSteps(fakestep.NewCounter()), true, notifyTo(f),
			func(o *Options) { o.Registerer = reg })
		sink := map[string]string{"sink": "default"}
		if v := labelled(t, reg, "autocapture_outbox_pending", sink); v != 0 {
			t.Fatalf("pending %v before any run, want 0", v)
		}
		for _, l := range []map[string]string{{"sink": "default", "reason": "error"}, {"sink": "default", "reason": "rate_limited"}} {
			if v := labelled(t, reg, "autocapture_notify_failures_total", l); v != 0 {
				t.Errorf("notify failures %v: %v, want a series at 0", l, v)
			}
		}
		for _, st := range []vocab.Status{vocab.StatusFailed, vocab.StatusPartial, vocab.StatusSucceeded} {
			if v := labelled(t, reg, "autocapture_runs_finished_total", map[string]string{"status": string(st)}); v != 0 {
				t.Errorf("finished{status=%s} %v before any run, want a series at 0", st, v)
			}
		}

		id := acceptOne(t, s, firing("fp", time.Now().UTC())).RunID
		waitRun(t, s, id, "finished while the notifier hangs", isFinished)
		const wait = 1200 * time.Millisecond
		time.Sleep(wait)
		if v := labelled(t, reg, "autocapture_outbox_pending", sink); v != float64(len(wantThread)) {
			t.Errorf("pending %v with the whole thread undelivered, want %d", v, len(wantThread))
		}
		if v := labelled(t, reg, "autocapture_outbox_oldest_age_seconds", sink); v < wait.Seconds() {
			t.Errorf("oldest pending %vs after waiting %s", v, wait)
		}

		close(f.gate)
		f.waitFor(t, id, keyFinished)
		deadline := time.Now().Add(30 * time.Second)
		for labelled(t, reg, "autocapture_outbox_pending", sink) != 0 {
			if time.Now().After(deadline) {
				t.Fatal("pending never dropped to 0 after delivery")
			}
			time.Sleep(50 * time.Millisecond)
		}
		if v := labelled(t, reg, "autocapture_outbox_oldest_age_seconds", sink); v != 0 {
			t.Errorf("oldest pending %v with nothing pending, want 0", v)
		}
		if n, err := testutil.GatherAndCount(reg, "autocapture_outbox_pending"); err != nil || n != 1 {
			t.Errorf("%d outbox series (%v), want one per configured sink", n, err)
		}
	})
}

// TestStepDurationHistogram: every step that ran is observed under its kind,
// for as long as it ran.
func TestStepDurationHistogram(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		reg := prometheus.NewRegistry()
		slow := fakestep.Func(func(context.Context, *vocab.Input) (*vocab.Result, error) {
			time.Sleep(300 * time.Millisecond)
			return &vocab.Result{Summary: "slow"}, nil
		})
		p := planner(
			func() playbooks.PlannedStep {
				return fakestep.Step("quick", vocab.TierMetrics, fakestep.OK(fakestep.NewCounter(), nil))
			},
			func() playbooks.PlannedStep { return fakestep.Step("slow", vocab.TierMetrics, slow) })
		s := newService(t, db, p, true, func(o *Options) { o.Registerer = reg })
		id := acceptOne(t, s, firing("fp", time.Now().UTC())).RunID
		if r := waitRun(t, s, id, "finished", isFinished); r.Status != vocab.StatusSucceeded {
			t.Fatalf("run %s (%s)", r.Status, r.Reason)
		}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "autocapture_step_duration_seconds" {
				continue
			}
			h := mf.GetMetric()[0].GetHistogram()
			if len(mf.GetMetric()) != 1 || h.GetSampleCount() != 2 {
				t.Fatalf("%d series, %d observations; want one kind (test), 2 steps", len(mf.GetMetric()), h.GetSampleCount())
			}
			if sum := h.GetSampleSum(); sum < 0.3 || sum > 30 {
				t.Errorf("steps ran %.3fs in all, one of them slept 0.3 s", sum)
			}
			return
		}
		t.Fatal("autocapture_step_duration_seconds not gathered")
	})
}
