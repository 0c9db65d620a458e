package lifecycle

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/outbox"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// keyProfiled is the parent's edit with the verdict the profile step
// "prof" of plan "pb" refined.
var keyProfiled = outbox.VerdictEdit{Profiled: "pb/prof"}.Key()

// thenProfile is base's plan with a profile step (id prof, tier 3) after it.
func thenProfile(base fakePlanner, prof func() vocab.Step) fakePlanner {
	return fakePlanner{Plans: func(a template.Alert) []*playbooks.Plan {
		ps := base.Plans(a)
		s := fakestep.Step("prof", vocab.TierProfile, prof())
		s.Kind = "profile"
		ps[0].Steps = append(ps[0].Steps, s)
		return ps
	}}
}

// gemmProfile is a profile step that finds GEMM at 92% of GPU time, with no
// baseline, after release (nil: at once).
func gemmProfile(release <-chan struct{}) func() vocab.Step {
	return func() vocab.Step {
		return fakestep.Func(func(ctx context.Context, in *vocab.Input) (*vocab.Result, error) {
			if err := awaitRelease(ctx, release); err != nil {
				return nil, err
			}
			return &vocab.Result{Summary: "profile: GEMM 92%", Profile: &vocab.ProfileFinding{Plan: in.Plan, Step: in.StepID,
				Family: "gemm", Share: 0.92, TopKernel: "sm90_xmma_gemm_bf16", TopKernelShare: 0.7,
				Shares: map[string]float64{"gemm": 0.92, "attention": 0.05}}}, nil
		})
	}
}

// checkProfiled asserts the run's history ends with the refined verdict
// refined again by the profile (same cause, the finding, no advice to take
// a profile), that the run's verdict is that one, and that the parent's
// profiled edit showed it once.
func checkProfiled(t *testing.T, s *proc, r *runs.Run) {
	t.Helper()
	if len(r.Verdicts) != 3 {
		t.Fatalf("verdicts = %+v, want preliminary, refined and profiled", r.Verdicts)
	}
	refined, prof := r.Verdicts[1], r.Verdicts[2]
	if prof.Kind != runs.VerdictProfiled || prof.Step != "prof" || prof.Verdict == nil || prof.Verdict.ID != refined.Verdict.ID ||
		prof.Verdict.Profile == nil || prof.Verdict.Profile.Family != "gemm" || prof.Verdict.Profile.Share != 0.92 {
		t.Errorf("profiled = %+v, want %s refined by the GEMM finding", prof, refined.Verdict.ID)
	}
	for _, a := range prof.Verdict.Advice {
		if strings.Contains(a, "profile") && !strings.Contains(a, "baseline: true") {
			t.Errorf("advice after the profile asks for one: %q", a)
		}
	}
	if r.Verdict == nil || r.Verdict.Profile == nil || !strings.Contains(vocab.VerdictText(r.Verdict), "profile: GEMM 92% of GPU time") {
		t.Errorf("run's verdict %+v: want the profiled one", r.Verdict)
	}
	s.out.eventually(t, r.ID, keyFinished)
	sum, err := s.Seams().Thread.Summary(context.Background(), r.ID, keyProfiled, false)
	if n := s.out.count(t, r.ID, keyProfiled); n != 1 || err != nil || sum.Verdict == nil || sum.Verdict.Profile == nil {
		t.Errorf("the parent's profiled edit recorded %d times, showing %+v (%v), want the finding once", n, sum.Verdict, err)
	}
}

// TestProfileRefinesTheVerdict: a profile step's finding refines the run's
// verdict in its history, its verdict column and the thread's parent.
func TestProfileRefinesTheVerdict(t *testing.T) {
	t.Parallel()
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		s := newProc(t, db, thenProfile(snapshotThenScrape(fullPool(nil)), gemmProfile(nil)), true)
		id := acceptOne(t, s, firing("fp", time.Now().UTC())).RunID
		checkProfiled(t, s, waitRun(t, s, id, "finished", isFinished))
		if n := testutil.ToFloat64(s.Metrics().Verdicts.WithLabelValues(runs.VerdictProfiled, vocab.VerdictKVPressure)); n != 1 {
			t.Errorf("autocapture_verdicts_total{kind=profiled,verdict=kv-pressure} = %v, want 1", n)
		}
	})
}

// TestProfiledVerdictAcrossACrash: a process killed while the profile step
// runs (before its step, verdict and edit commit, together) leaves none of
// them; the resumed run profiles again and records the refinement once.
func TestProfiledVerdictAcrossACrash(t *testing.T) {
	t.Parallel()
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		never := make(chan struct{})
		s1 := newProc(t, db, thenProfile(snapshotThenScrape(fullPool(nil)), gemmProfile(never)), true)
		id := acceptOne(t, s1, firing("fp", time.Now().UTC())).RunID
		waitRun(t, s1, id, "the refined verdict", func(r *runs.Run) bool { return len(r.Verdicts) == 2 })
		s1.abandon()
		s2 := newProc(t, db, thenProfile(snapshotThenScrape(fullPool(nil)), gemmProfile(nil)), true)
		r := waitRun(t, s2, id, "finished", isFinished)
		if r.Resumed != 1 {
			t.Errorf("resumed %d times, want once", r.Resumed)
		}
		checkProfiled(t, s2, r)
	})
}
