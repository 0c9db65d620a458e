package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

func TestCancelRunningRun(t *testing.T) {
	cases := []struct {
		name       string
		otherProcs bool
	}{
		{name: "same process"},
		{name: "from another process", otherProcs: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
				c := fakestep.NewCounter()
				started := make(chan string, 1)
				s1 := newProc(t, db, threeTierPlanner(c, fakestep.Block(c, started, nil)), true)
				id := acceptOne(t, s1, firing("fp", time.Now().UTC())).RunID
				fakestep.WaitFor(t, started, "step b to start")
				canceller := s1
				if tc.otherProcs {
					canceller = newProc(t, db, planner(), false)
				}
				if _, err := canceller.Cancel(context.Background(), id); err != nil {
					t.Fatalf("cancel: %v", err)
				}
				r := waitRun(t, s1, id, "finished", isFinished)
				b := stepByID(r, "b")
				if r.Status != vocab.StatusCancelled || b.Status != vocab.StatusCancelled || !strings.Contains(b.Error, "cancelled on request") {
					t.Fatalf("run %s, step b %s (%q); want both cancelled with the cause", r.Status, b.Status, b.Error)
				}
				if c.Count(id+"/c") != 0 {
					t.Fatal("a later tier ran after cancellation")
				}
			})
		})
	}
}

func TestResolutionDuringRun(t *testing.T) {
	cases := []struct {
		name       string
		otherProcs bool
	}{
		{name: "same process"},
		{name: "via another process", otherProcs: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
				c := fakestep.NewCounter()
				started := make(chan string, 1)
				p := planner(
					func() playbooks.PlannedStep {
						return fakestep.Step("metrics", vocab.TierMetrics, fakestep.OK(c, nil))
					},
					func() playbooks.PlannedStep {
						return fakestep.Step("frame", vocab.TierProfile, fakestep.Block(c, started, nil))
					},
				)
				s1 := newProc(t, db, p, true)
				t0 := time.Now().UTC().Add(-time.Minute)
				id := acceptOne(t, s1, firing("fp", t0)).RunID
				fakestep.WaitFor(t, started, "the tier-3 step to start")
				resolver := s1
				if tc.otherProcs {
					resolver = newProc(t, db, planner(), false)
				}
				if acc := acceptOne(t, resolver, resolvedAlert("fp", t0, time.Now().UTC())); acc.Outcome != runs.OutcomeResolved || acc.RunID != id {
					t.Fatalf("resolve: %+v", acc)
				}
				r := waitRun(t, s1, id, "finished", isFinished)
				frame, metrics := stepByID(r, "frame"), stepByID(r, "metrics")
				if metrics.Status != vocab.StatusSucceeded || frame.Status != vocab.StatusCancelled || !strings.Contains(frame.Error, "alert resolved") {
					t.Fatalf("metrics %s, frame %s (%q); want tier 1 done, tier 3 cancelled by resolution", metrics.Status, frame.Status, frame.Error)
				}
				if len(frame.Artifacts) != 1 {
					t.Errorf("the cancelled frame's files were not kept: %+v", frame.Artifacts)
				}
				if r.ResolvedAt == nil || r.Status != vocab.StatusPartial {
					t.Fatalf("run %s resolved_at %v; want partial and resolved", r.Status, r.ResolvedAt)
				}
			})
		})
	}
}

func TestMaxConcurrentQueues(t *testing.T) {
	t.Parallel()
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		c := fakestep.NewCounter()
		started := make(chan string, 3)
		release := make(chan struct{})
		reg := prometheus.NewRegistry()
		p := planner(func() playbooks.PlannedStep {
			return fakestep.Step("hold", vocab.TierMetrics, fakestep.Block(c, started, release))
		})
		s := newProc(t, db, p, true, func(o *procOpts) { o.cfg.MaxConcurrent = 1; o.reg = reg })
		var alerts []template.Alert
		for i := range 3 {
			alerts = append(alerts, firing(fmt.Sprintf("fp%d", i), time.Now().UTC()))
		}
		acc, err := s.Accept(context.Background(), alerts)
		if err != nil {
			t.Fatal(err)
		}
		fakestep.WaitFor(t, started, "the first run to start")
		depth, err := testutil.GatherAndCount(reg, "autocapture_runs_queue_depth")
		if err != nil || depth != 1 {
			t.Fatalf("queue depth metric missing: %d, %v", depth, err)
		}
		if v := gaugeValue(t, reg, "autocapture_runs_queue_depth"); v != 2 {
			t.Fatalf("queue depth %v while one run holds the only slot, want 2", v)
		}
		// Long enough for the reaper to take a queued run it wrongly thought stranded.
		wait := fastRuns().LeaseTimeout + 5*fastRuns().HeartbeatInterval
		time.Sleep(wait)
		// The queued runs have waited at least that long, and the gauge says so.
		if v := gaugeValue(t, reg, "autocapture_runs_queue_oldest_age_seconds"); v < wait.Seconds() {
			t.Fatalf("oldest queued age %vs after waiting %s", v, wait)
		}
		close(release)
		for _, a := range acc {
			if r := waitRun(t, s, a.RunID, "finished", isFinished); r.Status != vocab.StatusSucceeded || r.Resumed != 0 {
				t.Fatalf("run %s: %s, resumed %d; waiting for a worker is not being stranded", r.ID, r.Status, r.Resumed)
			}
		}
		if m := c.MaxSeen(); m != 1 {
			t.Fatalf("%d runs executed at once with max_concurrent 1", m)
		}
		if v := gaugeValue(t, reg, "autocapture_runs_queue_depth"); v != 0 {
			t.Fatalf("queue depth %v after all finished", v)
		}
	})
}

// gaugeValue reads one unlabelled gauge from reg.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s not gathered", name)
	return 0
}

func TestSkippedRuns(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		c := fakestep.NewCounter()
		cooled := fakePlanner{Plans: func(a template.Alert) []*playbooks.Plan {
			if a.Labels["alertname"] == "Unmatched" {
				return nil
			}
			p := plan("pb", fakestep.Step("a", vocab.TierMetrics, fakestep.OK(c, nil)))
			p.Cooldown, p.CooldownKey = time.Hour, "pb/127.0.0.1:8000"
			return []*playbooks.Plan{p}
		}}
		s := newProc(t, db, cooled, true)
		first := acceptOne(t, s, firing("fp1", time.Now().UTC())).RunID
		if r := waitRun(t, s, first, "finished", isFinished); r.Status != vocab.StatusSucceeded || len(r.Playbooks) != 1 {
			t.Fatalf("first run %s playbooks %v", r.Status, r.Playbooks)
		}
		cases := []struct {
			name   string
			alert  template.Alert
			reason string
		}{
			{"no playbook matched", func() template.Alert {
				a := firing("fp2", time.Now().UTC())
				a.Labels = template.KV{"alertname": "Unmatched"}
				return a
			}(), "no playbook matched"},
			{"cooldown", firing("fp3", time.Now().UTC()), "cooldown: playbook pb ran for run " + first},
		}
		for _, tc := range cases {
			id := acceptOne(t, s, tc.alert).RunID
			r := waitRun(t, s, id, "finished", isFinished)
			if r.Status != vocab.StatusSkipped || !strings.Contains(r.Reason, tc.reason) {
				t.Errorf("%s: run %s %q, want skipped with %q", tc.name, r.Status, r.Reason, tc.reason)
			}
		}
		if n := c.Count(first + "/a"); n != 1 {
			t.Fatalf("first run's step ran %d times", n)
		}
	})
}

func TestPlaybookMaxConcurrentWaits(t *testing.T) {
	// Sequential: with parallel siblings at load ~14 the reaper once took the
	// waiting run as stranded (its job fetched over lease_timeout before, still
	// 'running' until River's completer wrote the snooze): a spurious resume,
	// harmless (the old job found itself superseded), noted on issue 23.
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		c := fakestep.NewCounter()
		started := make(chan string, 2)
		release := make(chan struct{})
		p := fakePlanner{Plans: func(template.Alert) []*playbooks.Plan {
			pl := plan("profile-once", fakestep.Step("hold", vocab.TierMetrics, fakestep.Block(c, started, release)))
			pl.MaxConcurrent = 1
			return []*playbooks.Plan{pl}
		}}
		s := newProc(t, db, p, true) // runs.max_concurrent 4: only the playbook's cap holds them back
		acc, err := s.Accept(context.Background(), []template.Alert{firing("x", time.Now().UTC()), firing("y", time.Now().UTC())})
		if err != nil {
			t.Fatal(err)
		}
		fakestep.WaitFor(t, started, "the first run to start")
		select {
		case id := <-started:
			t.Fatalf("%s started while the playbook's only slot was taken", id)
		// The other run polls for the slot meanwhile, past lease_timeout: long
		// enough for the reaper to take it if it wrongly thought it stranded.
		case <-time.After(fastRuns().LeaseTimeout + 500*time.Millisecond):
		}
		close(release)
		for _, a := range acc {
			if r := waitRun(t, s, a.RunID, "finished", isFinished); r.Status != vocab.StatusSucceeded || r.Attempts != 1 || r.Resumed != 0 {
				t.Fatalf("run %s: %s after %d attempts, resumed %d; waiting must not use attempts nor be resumed", r.ID, r.Status, r.Attempts, r.Resumed)
			}
		}
		if m := c.MaxSeen(); m != 1 {
			t.Fatalf("%d runs of a max_concurrent 1 playbook at once", m)
		}
	})
}
