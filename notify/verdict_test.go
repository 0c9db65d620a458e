package notify

import (
	"testing"

	"github.com/autocapture/autocapture/vocab"
)

func TestVerdictChange(t *testing.T) {
	over := &vocab.Verdict{ID: "overload", Contributing: []string{"client-aborts", "kv-pressure"}, Evidence: []string{"queue 48"}}
	cases := []struct {
		name     string
		was, now *vocab.Verdict
		same     bool
		change   string
	}{
		{name: "same cause, factors in another order", was: over,
			now: &vocab.Verdict{ID: "overload", Contributing: []string{"kv-pressure", "client-aborts"}, Evidence: []string{"other"}}, same: true},
		{name: "the scope arrived", was: over,
			now: &vocab.Verdict{ID: "overload", Scope: vocab.ScopeSingle, Contributing: []string{"client-aborts", "kv-pressure", vocab.FactorSingleInstance}}, same: true},
		{name: "another cause", was: &vocab.Verdict{ID: "overload"},
			now: &vocab.Verdict{ID: "kv-pressure", Evidence: []string{"KV 99 % full", "more"}}, change: "was overload, now kv-pressure: KV 99 % full"},
		{name: "a factor more", was: &vocab.Verdict{ID: "overload"}, now: over,
			change: "was overload, now overload (also client-aborts, kv-pressure): queue 48"},
		{name: "no evidence", was: over, now: &vocab.Verdict{ID: "unexplained"},
			change: "was overload (also client-aborts, kv-pressure), now unexplained"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := SameVerdict(tc.was, tc.now); got != tc.same {
				t.Fatalf("SameVerdict = %v, want %v", got, tc.same)
			}
			if !tc.same {
				if got := VerdictChange(tc.was, tc.now); got != tc.change {
					t.Errorf("VerdictChange = %q, want %q", got, tc.change)
				}
			}
		})
	}
}
