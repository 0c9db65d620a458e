package notify

import (
	"testing"
	"time"
)

func TestSeenBeforeLine(t *testing.T) {
	tue := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	s := SeenBefore{Days: 7, OnInstance: 2, OnModel: 4, Earlier: []SeenRun{
		{ID: "c", At: tue.Add(48 * time.Hour), Verdict: "kv-pressure", SameInstance: true, SameModel: true},
		{ID: "b", At: tue.Add(24 * time.Hour), Verdict: "overload", SameModel: true},
		{ID: "a", At: tue, Verdict: "kv-pressure", SameInstance: true, SameModel: true},
		{ID: "z", At: tue.Add(-time.Hour), SameModel: true},
	}}
	if got, want := s.Line(), "3rd time since Tue 1 Dec on this instance: kv-pressure ×2 · 5th time in 7 days on this model"; got != want {
		t.Errorf("Line() = %q\nwant      %q", got, want)
	}
	s.OnInstance, s.Capped = 0, true
	if got, want := s.Line(), "5th+ time in 7 days on this model: kv-pressure ×2, no verdict, overload"; got != want {
		t.Errorf("model only: %q\nwant        %q", got, want)
	}
	if (SeenBefore{Days: 7}).Line() != "" {
		t.Error("never seen: want no line")
	}
	for n, want := range map[int]string{2: "2nd", 3: "3rd", 4: "4th", 11: "11th", 12: "12th", 21: "21st", 113: "113th"} {
		if got := ordinal(n); got != want {
			t.Errorf("ordinal(%d) = %s, want %s", n, got, want)
		}
	}
}

// TestRepeatedVerdict: the newest earlier run with the verdict on the same
// instance is preferred to a newer one on the same model only; a verdict
// no earlier run reached, or none, finds nothing; the line says when, in
// the largest unit, and where.
func TestRepeatedVerdict(t *testing.T) {
	tue := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	s := SeenBefore{Days: 7, Earlier: []SeenRun{
		{ID: "d", At: tue.Add(72 * time.Hour), Verdict: "overload", SameModel: true},
		{ID: "c", At: tue.Add(48 * time.Hour), Verdict: "kv-pressure", SameModel: true},
		{ID: "b", At: tue.Add(24 * time.Hour), Verdict: "kv-pressure", SameInstance: true, SameModel: true},
		{ID: "a", At: tue, Verdict: "kv-pressure", SameInstance: true},
	}}
	for _, tc := range []struct{ verdict, want string }{
		{"kv-pressure", "b"}, {"overload", "d"}, {"unexplained", ""}, {"", ""},
	} {
		r, ok := s.Repeated(tc.verdict)
		if ok != (tc.want != "") || r.ID != tc.want {
			t.Errorf("Repeated(%q) = %q %v, want %q", tc.verdict, r.ID, ok, tc.want)
		}
	}
	for d, want := range map[time.Duration]string{
		50 * time.Hour: "Same verdict as 2 days ago on this instance", 25 * time.Hour: "Same verdict as a day ago on this instance",
		5*time.Hour + 59*time.Minute: "Same verdict as 5 h ago on this instance", 40 * time.Minute: "Same verdict as 40 min ago on this instance",
		time.Minute: "Same verdict as moments ago on this instance",
	} {
		if got := (Repeat{Run: s.Earlier[2], Before: d}).Line(); got != want {
			t.Errorf("Line() after %s = %q, want %q", d, got, want)
		}
	}
	if got := (Repeat{Run: s.Earlier[0], Before: time.Hour}).Line(); got != "Same verdict as 1 h ago on this model" {
		t.Errorf("on the model: %q", got)
	}
}
