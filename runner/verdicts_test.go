package runner

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vocab"
)

// verdictThread is a strict far side that also keeps what the verdict's
// operations carried.
type verdictThread struct {
	*farSide
	mu      sync.Mutex
	edits   map[string][]*vocab.Verdict // by update key
	changes []string
}

func newVerdictThread() *verdictThread {
	return &verdictThread{farSide: newFarSide(), edits: map[string][]*vocab.Verdict{}}
}

func (v *verdictThread) Close(ctx context.Context, t notify.Thread, s notify.Summary) error {
	err := v.farSide.Close(ctx, t, s)
	if err == nil && !s.Retry { // a retry finds what its first attempt did
		v.mu.Lock()
		v.edits[s.Key] = append(v.edits[s.Key], s.Verdict)
		v.mu.Unlock()
	}
	return err
}

func (v *verdictThread) Reply(ctx context.Context, t notify.Thread, r notify.StepReport) error {
	err := v.farSide.Reply(ctx, t, r)
	if err == nil && r.Change != "" {
		v.mu.Lock()
		v.changes = append(v.changes, r.Change)
		v.mu.Unlock()
	}
	return err
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

// fullPool is a scrape that shows a full KV pool, after release (nil: at once).
func fullPool(release <-chan struct{}) func() vocab.Step {
	return func() vocab.Step {
		return fakestep.Func(func(ctx context.Context, _ *vocab.Input) (*vocab.Result, error) {
			if release != nil {
				select {
				case <-release:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
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
// verdict the refined one; the thread's change reply once.
func checkHistory(t *testing.T, r *runs.Run, th *verdictThread) {
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
	th.waitFor(t, r.ID, verdictChangedKey("pb", "tri"))
	th.waitFor(t, r.ID, keyFinished)
	time.Sleep(200 * time.Millisecond) // a doubled operation would arrive by now
	keys, doubled := th.thread(r.ID)
	if len(doubled) > 0 {
		t.Errorf("posted twice: %v (thread %v)", doubled, keys)
	}
	if i, j := idx(keys, stepKey("pb", "tri")), idx(keys, verdictChangedKey("pb", "tri")); i < 0 || j < i {
		t.Errorf("thread %v: the change reply must follow triage's reply", keys)
	}
	th.mu.Lock()
	defer th.mu.Unlock()
	if len(th.changes) != 1 || th.changes[0] != wantChange {
		t.Errorf("change replies %q, want one %q", th.changes, wantChange)
	}
}

func TestPreliminaryVerdictRefined(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, db dbRef) {
		release := make(chan struct{})
		th := newVerdictThread()
		s := newService(t, db, snapshotThenScrape(fullPool(release)), true, notifyTo(th))
		id := acceptOne(t, s, firing("fp", time.Now().UTC())).RunID
		r := waitRun(t, s, id, "a preliminary verdict", hasPreliminary)
		if r.FinishedAt != nil || r.Verdict == nil || r.Verdict.ID != vocab.VerdictOverload || !r.Verdict.Preliminary {
			t.Fatalf("while the scrape runs: run's verdict %+v (finished %v), want the preliminary overload", r.Verdict, r.FinishedAt)
		}
		th.waitFor(t, id, keyVerdictPreliminary) // the parent shows it before the scrape is in
		th.mu.Lock()
		if e := th.edits[keyVerdictPreliminary]; len(e) != 1 || e[0] == nil || e[0].ID != vocab.VerdictOverload {
			t.Errorf("parent's preliminary edit showed %+v", e)
		}
		th.mu.Unlock()
		close(release)
		checkHistory(t, waitRun(t, s, id, "finished", isFinished), th)
		checkVerdictCounts(t, s, vocab.VerdictOverload, vocab.VerdictKVPressure, 1)
	})
}

// checkVerdictCounts asserts the verdict metrics after one run whose
// preliminary verdict was pre and refined one ref: each counted once, and a
// change counted changes times.
func checkVerdictCounts(t *testing.T, s *Service, pre, ref string, changes float64) {
	t.Helper()
	if n := testutil.ToFloat64(s.life.Metrics().Verdicts.WithLabelValues(runs.VerdictPreliminary, pre)); n != 1 {
		t.Errorf("autocapture_verdicts_total{kind=preliminary,verdict=%s} = %v, want 1", pre, n)
	}
	if n := testutil.ToFloat64(s.life.Metrics().Verdicts.WithLabelValues(runs.VerdictRefined, ref)); n != 1 {
		t.Errorf("autocapture_verdicts_total{kind=refined,verdict=%s} = %v, want 1", ref, n)
	}
	if n := testutil.ToFloat64(s.life.Metrics().Changed.WithLabelValues(pre)); n != changes {
		t.Errorf("autocapture_verdict_changes_total{was=%s} = %v, want %v (now %s)", pre, n, changes, ref)
	}
}

func TestSameVerdictRefinedSaysNothing(t *testing.T) {
	forEachStore(t, func(t *testing.T, db dbRef) {
		th := newVerdictThread()
		empty := func() vocab.Step { // no full pool: the scrape agrees with the snapshot
			return fakestep.Func(func(context.Context, *vocab.Input) (*vocab.Result, error) {
				time.Sleep(300 * time.Millisecond)
				return &vocab.Result{Signals: vocab.Signals{vocab.SigKVUsage: 0.2}}, nil
			})
		}
		s := newService(t, db, snapshotThenScrape(empty), true, notifyTo(th))
		id := acceptOne(t, s, firing("fp", time.Now().UTC())).RunID
		r := waitRun(t, s, id, "finished", isFinished)
		if len(r.Verdicts) != 2 || r.Verdicts[1].Was != "" || r.Verdicts[1].Change != "" || r.Verdict.ID != vocab.VerdictOverload {
			t.Fatalf("verdicts = %+v, want preliminary and refined overload, no change", r.Verdicts)
		}
		th.waitFor(t, id, keyFinished)
		if keys, _ := th.thread(id); idx(keys, verdictChangedKey("pb", "tri")) >= 0 {
			t.Errorf("thread %v says the verdict changed; it did not", keys)
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
			forEachStore(t, func(t *testing.T, db dbRef) {
				th := newVerdictThread()
				if tc.uncommitPrelim {
					th.gate = make(chan struct{}) // nothing reaches the thread before the crash
				}
				never := make(chan struct{}) // the first process's scrape never returns
				s1 := newService(t, db, snapshotThenScrape(fullPool(never)), true, notifyTo(th))
				id := acceptOne(t, s1, firing("fp", time.Now().UTC())).RunID
				waitRun(t, s1, id, "a preliminary verdict", hasPreliminary)
				if !tc.uncommitPrelim {
					th.waitFor(t, id, keyVerdictPreliminary)
				}
				s1.abandon()
				if tc.uncommitPrelim {
					raw := rawDB(s1)
					for _, q := range []string{`DELETE FROM autocapture_verdicts WHERE run_id = $1`,
						`DELETE FROM autocapture_outbox WHERE run_id = $1 AND op_key = '` + keyVerdictPreliminary + `'`,
						`UPDATE autocapture_runs SET verdict = NULL WHERE id = $1`} {
						if _, err := raw.Exec(q, id); err != nil {
							t.Fatal(err)
						}
					}
					close(th.gate)
				}
				s2 := newService(t, db, snapshotThenScrape(fullPool(nil)), true, notifyTo(th))
				r := waitRun(t, s2, id, "finished", isFinished)
				if r.Resumed != 1 || stepByID(r, "snapshot").FinishedAt.After(r.Verdicts[0].At) {
					t.Errorf("resumed %d, snapshot %v, preliminary %v: want one resume, the snapshot not run again",
						r.Resumed, stepByID(r, "snapshot").FinishedAt, r.Verdicts)
				}
				checkHistory(t, r, th)
				th.waitFor(t, id, keyVerdictPreliminary)
				th.mu.Lock()
				defer th.mu.Unlock()
				if n := len(th.edits[keyVerdictPreliminary]); n != 1 {
					t.Errorf("the preliminary edit was delivered %d times (not counting retries that found it), want once", n)
				}
			})
		})
	}
}

// TestManifestHoldsTheVerdictHistory: the manifest someone reads from the
// bucket says what the thread said first and what it became.
func TestManifestHoldsTheVerdictHistory(t *testing.T) {
	forEachStore(t, func(t *testing.T, db dbRef) {
		st, _ := storage.NewLocal(t.TempDir())
		s := newService(t, db, snapshotThenScrape(fullPool(nil)), true, withStore(st))
		r := waitManifest(t, s, acceptOne(t, s, firing("fp-mv", time.Now().UTC())).RunID)
		m := manifestOf(t, st, r.Manifest)
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
