package main

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/slackstub"
	"github.com/autocapture/autocapture/runner/runs"
)

// runEndToThread measures, for every run, the time from its finished_at to
// the moment the Slack stand-in holds what the thread says of the end: the
// parent edited to the run's final status and the close/finished reply
// posted, whichever came later. A late upload's notice (uploads/done/…)
// waits for the bucket by design and is not counted. Both clocks are this
// machine's (the stand-in is in-process, PostgreSQL on loopback). A thread
// that never showed the end is reported, not measured.
func runEndToThread(t *testing.T, all []runs.Run, threads map[string][]slackstub.Message) []time.Duration {
	t.Helper()
	var ds []time.Duration
	for _, r := range all {
		if r.FinishedAt == nil || len(threads[r.ID]) != 1 {
			continue // the thread checks say why
		}
		p := threads[r.ID][0]
		var edited, replied time.Time
		for _, rev := range p.Revisions {
			if rev.Metadata != nil && rev.Metadata.EventPayload["status"] == r.Status {
				edited = rev.At
				break
			}
		}
		for _, m := range p.Replies {
			if m.Metadata != nil && m.Metadata.EventPayload["key"] == "close/finished" && len(m.Revisions) > 0 {
				replied = m.Revisions[0].At
				break
			}
		}
		if edited.IsZero() || replied.IsZero() {
			t.Errorf("run %s (%s): its thread never showed the end (parent edited %v, close/finished posted %v)",
				r.ID, r.Status, !edited.IsZero(), !replied.IsZero())
			continue
		}
		shown := edited
		if replied.After(shown) {
			shown = replied
		}
		ds = append(ds, shown.Sub(*r.FinishedAt))
	}
	return ds
}

// figures are the median, the 99th percentile (nearest rank) and the
// maximum of ds, rounded to milliseconds.
type figures struct {
	n              int
	p50, p99, pmax time.Duration
}

func figuresOf(ds []time.Duration) figures {
	if len(ds) == 0 {
		return figures{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(q float64) time.Duration {
		return s[max(int(math.Ceil(q*float64(len(s))))-1, 0)].Round(time.Millisecond)
	}
	return figures{n: len(s), p50: rank(0.5), p99: rank(0.99), pmax: s[len(s)-1].Round(time.Millisecond)}
}

func (f figures) String() string {
	return fmt.Sprintf("p50 %v, p99 %v, max %v over %d runs", f.p50, f.p99, f.pmax, f.n)
}
