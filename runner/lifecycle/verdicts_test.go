package lifecycle

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/outbox"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// The keys of the operations a verdict records in its run's thread.
var (
	keyPreliminary = outbox.VerdictEdit{Preliminary: true}.Key()
	keyTriReply    = outbox.StepReply{Plan: "pb", Step: "tri"}.Key()
	keyChanged     = outbox.VerdictChanged{Plan: "pb", Step: "tri"}.Key()
	keyFinished    = outbox.Finished{}.Key()
)

// opIndex is where key first is in ops (-1: nowhere).
func opIndex(ops []recOp, key string) int {
	return slices.IndexFunc(ops, func(o recOp) bool { return o.key == key })
}

// snapshotThenScrape is a plan whose snapshot says overload at once and whose
// scrape (scrape: the step it runs) then shows a full KV pool: triage (a
// stand-in reading its Prior) refines overload into kv-pressure.
func snapshotThenScrape(scrape func() vocab.Step) fakePlanner {
	triage := func() vocab.Step {
		return fakestep.Func(func(_ context.Context, in *vocab.Input) (*vocab.Result, error) {
			v := &vocab.Verdict{ID: vocab.VerdictOverload, Evidence: []string{"queue 48 waiting"}}
			if r := in.Prior["scrape"]; r != nil && r.Signals[vocab.SigKVUsage] > 0.95 {
				v = &vocab.Verdict{ID: vocab.VerdictKVPressure, Contributing: []string{vocab.VerdictOverload},
					Evidence: []string{"KV cache 99 % full"}}
			}
			var used []string
			for _, id := range []string{"snapshot", "scrape"} {
				if in.Prior[id] != nil {
					used = append(used, id)
				}
			}
			org := map[string]vocab.Origin{vocab.SigQueueDepth: {Step: "snapshot", Source: vocab.SourcePromQL, Window: 0, Age: 0.1}}
			return &vocab.Result{Summary: v.ID, Verdict: v, Findings: map[string]any{"sources": used, "origins": org}}, nil
		})
	}
	return planner(
		func() playbooks.PlannedStep {
			return fakestep.Step("snapshot", vocab.TierMetrics, fakestep.Func(func(context.Context, *vocab.Input) (*vocab.Result, error) {
				return &vocab.Result{Summary: "promql", Signals: vocab.Signals{vocab.SigQueueDepth: 48},
					Findings: map[string]any{"source": vocab.SourcePromQL}}, nil
			}))
		},
		func() playbooks.PlannedStep { return fakestep.Step("scrape", vocab.TierMetrics, scrape()) },
		func() playbooks.PlannedStep {
			s := fakestep.Step("tri", vocab.TierTriage, triage())
			s.Kind = "triage"
			return s
		})
}

// awaitRelease waits until release is closed (nil: not at all) or ctx ends.
func awaitRelease(ctx context.Context, release <-chan struct{}) error {
	if release == nil {
		return nil
	}
	select {
	case <-release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// fullPool is a scrape that shows a full KV pool, after release (nil: at once).
func fullPool(release <-chan struct{}) func() vocab.Step {
	return func() vocab.Step {
		return fakestep.Func(func(ctx context.Context, _ *vocab.Input) (*vocab.Result, error) {
			if err := awaitRelease(ctx, release); err != nil {
				return nil, err
			}
			return &vocab.Result{Summary: "scrape", Signals: vocab.Signals{vocab.SigKVUsage: 0.99}}, nil
		})
	}
}

func hasPreliminary(r *runs.Run) bool {
	return len(r.Verdicts) > 0 && r.Verdicts[0].Kind == runs.VerdictPreliminary
}

// checkHistory asserts the run's verdicts: one preliminary overload from the
// snapshot, then the refined kv-pressure saying what it was; the run's
// verdict the refined one; the thread's change reply once, after
// triage's, and the preliminary edit once.
func checkHistory(t *testing.T, s *proc, r *runs.Run) {
	t.Helper()
	if len(r.Verdicts) != 2 {
		t.Fatalf("verdicts = %+v, want a preliminary and a refined one", r.Verdicts)
	}
	pre, ref := r.Verdicts[0], r.Verdicts[1]
	if pre.Kind != runs.VerdictPreliminary || pre.Verdict.ID != vocab.VerdictOverload || !pre.Verdict.Preliminary ||
		strings.Join(pre.Sources, ",") != "snapshot" || strings.Join(pre.Waiting, ",") != "scrape" ||
		pre.Origins[vocab.SigQueueDepth].Step != "snapshot" || pre.Step != "tri" || pre.At.IsZero() {
		t.Errorf("preliminary = %+v", pre)
	}
	wantChange := "was overload, now kv-pressure (also overload): KV cache 99 % full"
	if ref.Kind != runs.VerdictRefined || ref.Verdict.ID != vocab.VerdictKVPressure || ref.Verdict.Preliminary ||
		strings.Join(ref.Sources, ",") != "snapshot,scrape" || ref.Was != vocab.VerdictOverload || ref.Change != wantChange ||
		ref.At.Before(pre.At) {
		t.Errorf("refined = %+v, want kv-pressure, was overload, %q", ref, wantChange)
	}
	if r.Verdict == nil || r.Verdict.ID != vocab.VerdictKVPressure || r.Verdict.Preliminary {
		t.Errorf("run's verdict = %+v, want the refined kv-pressure", r.Verdict)
	}
	s.out.eventually(t, r.ID, keyFinished)
	ops := s.out.ops(t, r.ID)
	for _, key := range []string{keyPreliminary, keyChanged, keyTriReply} {
		if n := s.out.count(t, r.ID, key); n != 1 {
			t.Errorf("thread %v: %s recorded %d times, want once", ops, key, n)
		}
	}
	if i, j := opIndex(ops, keyTriReply), opIndex(ops, keyChanged); i < 0 || j < i {
		t.Errorf("thread %v: the change reply must follow triage's reply", ops)
	}
	rep, err := s.Seams().Thread.ChangeReply(context.Background(), r.ID, keyChanged, "pb", "tri", false)
	if err != nil || rep.Change != wantChange {
		t.Errorf("change reply %q (%v), want %q", rep.Change, err, wantChange)
	}
}

func TestPreliminaryVerdictRefined(t *testing.T) {
	t.Parallel()
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		release := make(chan struct{})
		s := newProc(t, db, snapshotThenScrape(fullPool(release)), true)
		id := acceptOne(t, s, firing("fp", time.Now().UTC())).RunID
		r := waitRun(t, s, id, "a preliminary verdict", hasPreliminary)
		if r.FinishedAt != nil || r.Verdict == nil || r.Verdict.ID != vocab.VerdictOverload || !r.Verdict.Preliminary {
			t.Fatalf("while the scrape runs: run's verdict %+v (finished %v), want the preliminary overload", r.Verdict, r.FinishedAt)
		}
		// The parent shows it before the scrape is in.
		sum, err := s.Seams().Thread.Summary(context.Background(), id, keyPreliminary, false)
		if n := s.out.count(t, id, keyPreliminary); n != 1 || err != nil || sum.Verdict == nil || sum.Verdict.ID != vocab.VerdictOverload {
			t.Errorf("parent's preliminary edit recorded %d times, showed %+v (%v)", n, sum.Verdict, err)
		}
		close(release)
		checkHistory(t, s, waitRun(t, s, id, "finished", isFinished))
		checkVerdictCounts(t, s, vocab.VerdictOverload, vocab.VerdictKVPressure, 1)
	})
}

// checkVerdictCounts asserts the verdict metrics after one run whose
// preliminary verdict was pre and refined one ref: each counted once, and a
// change counted changes times.
func checkVerdictCounts(t *testing.T, s *proc, pre, ref string, changes float64) {
	t.Helper()
	if n := testutil.ToFloat64(s.Metrics().Verdicts.WithLabelValues(runs.VerdictPreliminary, pre)); n != 1 {
		t.Errorf("autocapture_verdicts_total{kind=preliminary,verdict=%s} = %v, want 1", pre, n)
	}
	if n := testutil.ToFloat64(s.Metrics().Verdicts.WithLabelValues(runs.VerdictRefined, ref)); n != 1 {
		t.Errorf("autocapture_verdicts_total{kind=refined,verdict=%s} = %v, want 1", ref, n)
	}
	if n := testutil.ToFloat64(s.Metrics().Changed.WithLabelValues(pre)); n != changes {
		t.Errorf("autocapture_verdict_changes_total{was=%s} = %v, want %v (now %s)", pre, n, changes, ref)
	}
}

func TestSameVerdictRefinedSaysNothing(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		empty := func() vocab.Step { // no full pool: the scrape agrees with the snapshot
			return fakestep.Func(func(context.Context, *vocab.Input) (*vocab.Result, error) {
				time.Sleep(300 * time.Millisecond)
				return &vocab.Result{Signals: vocab.Signals{vocab.SigKVUsage: 0.2}}, nil
			})
		}
		s := newProc(t, db, snapshotThenScrape(empty), true)
		id := acceptOne(t, s, firing("fp", time.Now().UTC())).RunID
		r := waitRun(t, s, id, "finished", isFinished)
		if len(r.Verdicts) != 2 || r.Verdicts[1].Was != "" || r.Verdicts[1].Change != "" || r.Verdict.ID != vocab.VerdictOverload {
			t.Fatalf("verdicts = %+v, want preliminary and refined overload, no change", r.Verdicts)
		}
		s.out.eventually(t, id, keyFinished)
		if ops := s.out.ops(t, id); opIndex(ops, keyChanged) >= 0 {
			t.Errorf("thread %v says the verdict changed; it did not", ops)
		}
		checkVerdictCounts(t, s, vocab.VerdictOverload, vocab.VerdictOverload, 0)
	})
}

// TestVerdictsAcrossACrash kills the process (its store cut off) between
// the preliminary verdict and the refined one and resumes on another: the
// thread shows the preliminary once and the change once, and the history
// holds both. In the second case the kill came before the preliminary's
// transaction committed: its rows (the verdict, the run's verdict column,
// the parent's edit) are removed, as a transaction that never committed
// leaves none of them, while the snapshot's step stays recorded.
func TestVerdictsAcrossACrash(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name           string
		uncommitPrelim bool
	}{
		{name: "after the preliminary committed"},
		{name: "before the preliminary committed", uncommitPrelim: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
				never := make(chan struct{}) // the first process's scrape never returns
				s1 := newProc(t, db, snapshotThenScrape(fullPool(never)), true)
				id := acceptOne(t, s1, firing("fp", time.Now().UTC())).RunID
				waitRun(t, s1, id, "a preliminary verdict", hasPreliminary)
				s1.abandon()
				if tc.uncommitPrelim {
					raw := s1.raw
					for _, q := range []string{`DELETE FROM autocapture_verdicts WHERE run_id = $1`,
						`DELETE FROM test_thread_ops WHERE run_id = $1 AND op_key = '` + keyPreliminary + `'`,
						`UPDATE autocapture_runs SET verdict = NULL WHERE id = $1`} {
						if _, err := raw.Exec(q, id); err != nil {
							t.Fatal(err)
						}
					}
				}
				s2 := newProc(t, db, snapshotThenScrape(fullPool(nil)), true)
				r := waitRun(t, s2, id, "finished", isFinished)
				if r.Resumed != 1 || stepByID(r, "snapshot").FinishedAt.After(r.Verdicts[0].At) {
					t.Errorf("resumed %d, snapshot %v, preliminary %v: want one resume, the snapshot not run again",
						r.Resumed, stepByID(r, "snapshot").FinishedAt, r.Verdicts)
				}
				checkHistory(t, s2, r)
			})
		})
	}
}

// TestManifestHoldsTheVerdictHistory: the manifest someone reads from the
// bucket says what the thread said first and what it became.
func TestManifestHoldsTheVerdictHistory(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		s := newProc(t, db, snapshotThenScrape(fullPool(nil)), true)
		r := waitRun(t, s, acceptOne(t, s, firing("fp-mv", time.Now().UTC())).RunID, "finished", isFinished)
		m, ok, err := s.Seams().Keeper.ManifestOf(context.Background(), r.ID)
		if err != nil || !ok {
			t.Fatalf("manifest of %s: %v, %v", r.ID, ok, err)
		}
		if len(m.Verdicts) != len(r.Verdicts) || len(m.Verdicts) == 0 {
			t.Fatalf("manifest verdicts %+v, run's %+v", m.Verdicts, r.Verdicts)
		}
		last := m.Verdicts[len(m.Verdicts)-1]
		if last.Kind != runs.VerdictRefined || last.Verdict == nil || last.Verdict.ID != vocab.VerdictKVPressure ||
			m.Verdict == nil || m.Verdict.ID != last.Verdict.ID {
			t.Errorf("manifest's last verdict %+v (verdict %+v), want the refined kv-pressure", last, m.Verdict)
		}
		for i, e := range m.Verdicts {
			if e.Kind != r.Verdicts[i].Kind || e.Verdict.ID != r.Verdicts[i].Verdict.ID || e.Was != r.Verdicts[i].Was {
				t.Errorf("manifest verdict %d = %+v, run's %+v", i, e, r.Verdicts[i])
			}
		}
	})
}
