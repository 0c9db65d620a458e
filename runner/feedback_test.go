package runner

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// TestFeedbackRecordedAndOverwritten: an answer shows on the run; the same
// user answering again keeps one row (the latest answer), another user adds
// one; a repeated answer is not counted twice; an unknown run or verdict is
// refused with the error the handler acts on, and counts nothing.
func TestFeedbackRecordedAndOverwritten(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		s := newService(t, db, planner(), false)
		ctx := context.Background()
		id := acceptOne(t, s, firing("fp", time.Now().UTC())).RunID
		alice, bob := runs.User{ID: "U0ALICE", Name: "alice"}, runs.User{ID: "U0BOB"}
		count := func(correct string) float64 {
			return testutil.ToFloat64(s.life.Metrics().Feedback.WithLabelValues(vocab.VerdictKVPressure, correct))
		}
		feedback := func(u runs.User, correct bool) {
			t.Helper()
			if err := s.Feedback(ctx, id, vocab.VerdictKVPressure, correct, u); err != nil {
				t.Fatalf("feedback of %s: %v", u.ID, err)
			}
		}
		shown := func(want ...runs.Feedback) {
			t.Helper()
			r, err := s.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Feedback) != len(want) {
				t.Fatalf("run shows feedback %+v, want %+v", r.Feedback, want)
			}
			for i, f := range r.Feedback {
				w := want[i]
				if f.Verdict != w.Verdict || f.Correct != w.Correct || f.User != w.User || f.At.IsZero() {
					t.Errorf("feedback %d is %+v, want %+v", i, f, w)
				}
			}
		}

		feedback(alice, true)
		feedback(alice, true) // the same click again: no change
		shown(runs.Feedback{Verdict: vocab.VerdictKVPressure, Correct: true, User: alice})
		if count("true") != 1 {
			t.Fatalf("counted %v right answers, want 1", count("true"))
		}

		feedback(alice, false) // a change of mind overwrites
		feedback(bob, true)
		shown(runs.Feedback{Verdict: vocab.VerdictKVPressure, Correct: false, User: alice},
			runs.Feedback{Verdict: vocab.VerdictKVPressure, Correct: true, User: bob})
		if count("true") != 2 || count("false") != 1 {
			t.Fatalf("counted %v right, %v wrong; want 2 and 1", count("true"), count("false"))
		}

		if err := s.Feedback(ctx, "no-such-run", vocab.VerdictKVPressure, true, alice); !errors.Is(err, runs.ErrNotFound) {
			t.Errorf("feedback on an unknown run: %v, want runs.ErrNotFound", err)
		}
		for _, bad := range []struct {
			verdict string
			user    runs.User
		}{{"not-a-verdict", alice}, {vocab.VerdictKVPressure, runs.User{Name: "no id"}}} {
			if err := s.Feedback(ctx, id, bad.verdict, true, bad.user); !errors.Is(err, runs.ErrBadFeedback) {
				t.Errorf("feedback %+v: %v, want runs.ErrBadFeedback", bad, err)
			}
		}
		if count("true") != 2 || count("false") != 1 {
			t.Errorf("refused feedback was counted: %v right, %v wrong", count("true"), count("false"))
		}
		if l, err := s.List(ctx, runs.ListQuery{}); err != nil || len(l.Runs) != 1 || l.Runs[0].Feedback != nil {
			t.Errorf("list: %v, %+v; want the run without its feedback", err, l.Runs)
		}
	})
}
