package notify

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// SeenBefore is how often a run's alert fired before, within Days: on the
// same instance and on the same model, with the earlier runs' verdicts. The
// parent and the run page show it as one line (Line).
type SeenBefore struct {
	Days            int    `json:"days"`
	Instance, Model string `json:"-"`
	// OnInstance and OnModel count the earlier runs (Capped: at least).
	OnInstance int  `json:"on_instance"`
	OnModel    int  `json:"on_model"`
	Capped     bool `json:"capped,omitempty"`
	// Earlier are the earlier runs, newest first.
	Earlier []SeenRun `json:"earlier"`
}

// SeenRun is one earlier run of the alert.
type SeenRun struct {
	ID           string    `json:"id"`
	At           time.Time `json:"at"`
	Verdict      string    `json:"verdict,omitempty"` // its verdict id, "" for none
	SameInstance bool      `json:"same_instance"`
	SameModel    bool      `json:"same_model"`
}

// Line says it in words: "3rd time since Tue 2 Dec on this instance:
// kv-pressure ×2, overload · 5th on this model". Empty when it never fired
// before.
func (s SeenBefore) Line() string {
	if s.OnInstance == 0 && s.OnModel == 0 {
		return ""
	}
	plus := ""
	if s.Capped {
		plus = "+"
	}
	var parts []string
	if s.OnInstance > 0 {
		first := s.first(func(r SeenRun) bool { return r.SameInstance })
		parts = append(parts, fmt.Sprintf("%s%s time since %s on this instance: %s", ordinal(s.OnInstance+1), plus,
			first.UTC().Format("Mon 2 Jan"), verdicts(s.Earlier, func(r SeenRun) bool { return r.SameInstance })))
	}
	if s.OnModel > 0 {
		what := fmt.Sprintf("%s%s time in %d days on this model", ordinal(s.OnModel+1), plus, s.Days)
		if s.OnInstance == 0 {
			what += ": " + verdicts(s.Earlier, func(r SeenRun) bool { return r.SameModel })
		}
		parts = append(parts, what)
	}
	return strings.Join(parts, " · ")
}

func (s SeenBefore) first(keep func(SeenRun) bool) time.Time {
	var t time.Time
	for _, r := range s.Earlier {
		if keep(r) && (t.IsZero() || r.At.Before(t)) {
			t = r.At
		}
	}
	return t
}

// verdicts counts the kept runs' verdicts, the most frequent first.
func verdicts(runs []SeenRun, keep func(SeenRun) bool) string {
	n := map[string]int{}
	for _, r := range runs {
		if keep(r) {
			v := r.Verdict
			if v == "" {
				v = "no verdict"
			}
			n[v]++
		}
	}
	ids := make([]string, 0, len(n))
	for v := range n {
		ids = append(ids, v)
	}
	sort.Slice(ids, func(i, j int) bool { return n[ids[i]] > n[ids[j]] || n[ids[i]] == n[ids[j]] && ids[i] < ids[j] })
	for i, v := range ids {
		if n[v] > 1 {
			ids[i] = v + " ×" + strconv.Itoa(n[v])
		}
	}
	return strings.Join(ids, ", ")
}

// ordinal is 2nd, 3rd, 11th, 21st.
func ordinal(n int) string {
	suffix := "th"
	if n%100 < 11 || n%100 > 13 {
		switch n % 10 {
		case 1:
			suffix = "st"
		case 2:
			suffix = "nd"
		case 3:
			suffix = "rd"
		}
	}
	return strconv.Itoa(n) + suffix
}

// Repeat is the earlier run whose verdict a run's repeats within the
// seen-before window: the reply with the verdict and the run page link its
// evidence ("same verdict as 2 days ago on this instance").
type Repeat struct {
	Run SeenRun `json:"run"`
	// Before is how long before the run it was created.
	Before time.Duration `json:"before"`
	// EvidenceName and EvidenceKey are its key artifact (its profile's
	// report), "" when it kept none; EvidenceLink is that artifact's link as
	// a thread shows it, made at delivery (nil: none).
	EvidenceName string `json:"evidence_name,omitempty"`
	EvidenceKey  string `json:"evidence_key,omitempty"`
	EvidenceLink *Link  `json:"-"`
}

// Repeated is the newest earlier run with verdict id on the same
// instance, else on the same model; false when none.
func (s SeenBefore) Repeated(id string) (SeenRun, bool) {
	if id == "" {
		return SeenRun{}, false
	}
	for _, same := range []func(SeenRun) bool{
		func(r SeenRun) bool { return r.SameInstance },
		func(r SeenRun) bool { return r.SameModel },
	} {
		for _, r := range s.Earlier { // newest first
			if r.Verdict == id && same(r) {
				return r, true
			}
		}
	}
	return SeenRun{}, false
}

// Line says it in words: "Same verdict as 2 days ago on this instance".
func (v Repeat) Line() string {
	where := "on this model"
	if v.Run.SameInstance {
		where = "on this instance"
	}
	return fmt.Sprintf("Same verdict as %s %s", ago(v.Before), where)
}

// ago is a span in the largest unit that fits: "2 days ago", "5 h ago".
func ago(d time.Duration) string {
	switch {
	case d >= 48*time.Hour:
		return strconv.Itoa(int(d/(24*time.Hour))) + " days ago"
	case d >= 24*time.Hour:
		return "a day ago"
	case d >= time.Hour:
		return strconv.Itoa(int(d/time.Hour)) + " h ago"
	case d >= 2*time.Minute:
		return strconv.Itoa(int(d/time.Minute)) + " min ago"
	}
	return "moments ago"
}
