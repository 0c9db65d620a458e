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
