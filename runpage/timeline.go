package runpage

import (
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// The run page's timeline: what happened when, from the alert firing: the
// run opening and starting, each step from its start to its end with its
// status, each verdict, the run's end and the alert's resolution, in time
// order, each at its offset from the alert ("+7.1 s").

// timelineEntry is one row of the timeline.
type timelineEntry struct {
	At  time.Time
	Rel string // the offset from the origin: "+7.1 s"
	// What happened, in words: "alert VLLMHighTTFT fired", "step vllm/kv_chart (chart)".
	Event string
	// Status, for a step or the run's end, shown as a badge with StatusText.
	Status     vocab.Status
	StatusText string
	// Detail follows the event: "ended +2.2 s, after 1.2 s", the verdict's change.
	Detail string
	order  int // insertion order, which breaks ties
}

// timeline is the run's events in time order; origin is the alert's
// startsAt (the run's creation when the alert carried none).
type timeline struct {
	Origin     time.Time
	FromCreate bool // no startsAt: offsets are from the run opening
	Entries    []timelineEntry
}

// newTimeline lays out the run's events; now places "still running".
func newTimeline(r *runs.Run, now time.Time) timeline {
	tl := timeline{Origin: r.StartsAt}
	if tl.Origin.IsZero() {
		tl.Origin, tl.FromCreate = r.CreatedAt, true
	}
	add := func(e timelineEntry) {
		if e.At.IsZero() {
			return
		}
		e.order, e.Rel = len(tl.Entries), relTime(e.At.Sub(tl.Origin))
		tl.Entries = append(tl.Entries, e)
	}
	name := r.Alertname
	if name == "" {
		name = "the alert"
	}
	if !tl.FromCreate {
		add(timelineEntry{At: r.StartsAt, Event: "alert " + name + " fired"})
	}
	add(timelineEntry{At: r.CreatedAt, Event: "run opened"})
	if r.StartedAt != nil {
		e := timelineEntry{At: *r.StartedAt, Event: "run started"}
		if r.Resumed > 0 {
			e.Detail = "resumed " + strconv.Itoa(r.Resumed) + "× since"
		}
		add(e)
	}
	for _, st := range r.Steps {
		start := st.StartedAt
		if start.IsZero() && !st.FinishedAt.IsZero() {
			start = st.FinishedAt.Add(-time.Duration(st.DurationMS) * time.Millisecond)
		}
		e := timelineEntry{At: start, Event: "step " + st.Plan + "/" + st.ID + " (" + st.Kind + ")",
			Status: st.Status, StatusText: stepStatusText(st.Status)}
		if !st.FinishedAt.IsZero() {
			e.Detail = "ended " + relTime(st.FinishedAt.Sub(tl.Origin)) + ", after " + humanDuration(time.Duration(st.DurationMS)*time.Millisecond)
		}
		add(e)
	}
	verdicts(r, add)
	if r.CancelRequestedAt != nil {
		add(timelineEntry{At: *r.CancelRequestedAt, Event: "cancel requested"})
	}
	if r.FinishedAt != nil {
		add(timelineEntry{At: *r.FinishedAt, Event: "run ended", Status: r.Status, StatusText: string(r.Status), Detail: r.Reason})
	} else if r.Status == vocab.StatusQueued || r.Status == vocab.StatusRunning {
		add(timelineEntry{At: now, Event: "now (this page)", Status: r.Status, StatusText: string(r.Status), Detail: "no end yet"})
	}
	if r.ResolvedAt != nil {
		add(timelineEntry{At: *r.ResolvedAt, Event: "alert resolved"})
	}
	sort.SliceStable(tl.Entries, func(i, j int) bool {
		a, b := tl.Entries[i], tl.Entries[j]
		if !a.At.Equal(b.At) {
			return a.At.Before(b.At)
		}
		return a.order < b.order
	})
	return tl
}

// verdicts adds each verdict the run reached, from its history; a run
// recorded without one shows its verdict at its triage step's end.
func verdicts(r *runs.Run, add func(timelineEntry)) {
	for _, e := range r.Verdicts {
		if e.Verdict == nil {
			continue
		}
		t := timelineEntry{At: e.At, Event: "verdict: " + verdictInWords(e.Verdict.ID)}
		if e.Kind == runs.VerdictPreliminary {
			t.Event = "preliminary verdict: " + verdictInWords(e.Verdict.ID)
		}
		switch { // the history table below has the thread's words (Change)
		case e.Was != "" && e.Was != e.Verdict.ID:
			t.Detail = "was " + verdictInWords(e.Was)
		case len(e.Waiting) > 0:
			t.Detail = "waiting for " + strings.Join(e.Waiting, ", ")
		}
		add(t)
	}
	if len(r.Verdicts) > 0 || r.Verdict == nil {
		return
	}
	for _, st := range r.Steps {
		if st.Verdict != nil {
			add(timelineEntry{At: st.FinishedAt, Event: "verdict: " + verdictInWords(st.Verdict.ID)})
		}
	}
}

// relTime is an offset from the timeline's origin: "+7.1 s", "+2m05s",
// "−0.4 s" for an event before it.
func relTime(d time.Duration) string {
	sign := "+"
	if d < 0 {
		sign, d = "−", -d
	}
	if d < time.Minute {
		return sign + strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s"
	}
	d = d.Round(time.Second)
	m, s := int(d/time.Minute), int((d%time.Minute)/time.Second)
	if m < 60 {
		return sign + strconv.Itoa(m) + "m" + twoDigits(s) + "s"
	}
	return sign + strconv.Itoa(m/60) + "h" + twoDigits(m%60) + "m" + twoDigits(s) + "s"
}

func twoDigits(n int) string {
	if n < 10 {
		return "0" + strconv.Itoa(n)
	}
	return strconv.Itoa(n)
}
