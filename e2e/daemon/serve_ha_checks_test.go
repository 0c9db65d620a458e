package daemon

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/slackstub"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// What TestServeHA checks once the runs are final, each from the side it
// lands on.

// haSteps are the playbook's steps in order.
var haSteps = []string{"first", "hold", "last"}

// checkRuns: 50 runs of 50 distinct alerts, all succeeded, each step
// recorded once; the sim saw each run's first and last step once; the
// killed replica's runs (victim) resumed once, the others never. It returns,
// for each resumed run, the time from the kill to its hold step's start on
// another replica.
func checkRuns(t *testing.T, all []runs.Run, victim map[string]bool, killed time.Time, sim *profSim) []time.Duration {
	t.Helper()
	if len(all) != haAlerts {
		t.Errorf("%d runs, want exactly %d (one per alert)", len(all), haAlerts)
	}
	tagged := sim.taggedCalls()
	seen := map[string]bool{}
	var next []time.Duration
	for _, r := range all {
		a := r.Labels["ha_alert"]
		if seen[a] {
			t.Errorf("alert %s has more than one run", a)
		}
		seen[a] = true
		n := map[string]int{}
		for _, s := range r.Steps {
			n[s.ID]++
		}
		if r.Status != vocab.StatusSucceeded || len(r.Steps) != len(haSteps) || n["first"] != 1 || n["hold"] != 1 || n["last"] != 1 {
			t.Errorf("run %s (%s): %s %q, steps %v: want succeeded with each step recorded once", r.ID, a, r.Status, r.Reason, n)
		}
		if c := tagged[a]; c["/metrics"] != 1 || c["/version"] != 1 || len(c) != 2 {
			t.Errorf("run %s (%s): the sim saw its steps' requests %v, want /metrics and /version once each", r.ID, a, c)
		}
		want := 0
		if victim[r.ID] {
			want = 1
			if hold := pfStepOf(r, "hold"); hold != nil {
				next = append(next, hold.StartedAt.Sub(killed))
			}
		}
		if r.Resumed != want || r.Attempts != want+1 {
			t.Errorf("run %s: resumed %d, %d attempts; want %d and %d", r.ID, r.Resumed, r.Attempts, want, want+1)
		}
	}
	if len(tagged) != haAlerts {
		t.Errorf("the sim saw requests for %d alerts, want %d", len(tagged), haAlerts)
	}
	for i, d := range next {
		if d <= 0 || d > haLiveness {
			t.Errorf("resumed run %d: its hold step started %v after the kill, want within (0, %v]", i, d, haLiveness)
		}
	}
	return next
}

// checkExecutedOn: each run started on one replica, a resumed one on the
// killed replica v and then on one other.
func checkExecutedOn(t *testing.T, ds []*daemon, v int, victim map[string]bool) {
	t.Helper()
	for _, r := range ds[(v+1)%len(ds)].runsN(t, haAlertname) {
		on := strings.Split(executedBy(ds, r.ID), "+")
		switch {
		case victim[r.ID] && (len(on) != 2 || !slices.Contains(on, strconv.Itoa(v))):
			t.Errorf("run %s of the killed replica %d started on replicas %v, want it and one other", r.ID, v, on)
		case !victim[r.ID] && len(on) != 1:
			t.Errorf("run %s started on replicas %v, want one", r.ID, on)
		}
	}
}

// parents are the channel's top-level messages.
func parents(stub *slackstub.Server) []slackstub.Message { return stub.Messages(slackChannel) }

// threadsShowing counts the channel's threads with a reply keyed key.
func threadsShowing(stub *slackstub.Server, key string) int {
	done := 0
	for _, m := range parents(stub) {
		if slices.Contains(replyKeys(m), key) {
			done++
		}
	}
	return done
}

// waitThreads waits up to timeout until n threads have a reply keyed key,
// then a second more for any doubled post to land.
func waitThreads(t *testing.T, stub *slackstub.Server, n int, key string, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, "every thread to show "+key, func() bool { return threadsShowing(stub, key) >= n })
	time.Sleep(time.Second) // a doubled post from another replica would land by now
}

// checkThreads: one parent per run and no other; every step's reply and the
// end once; a resumed run's thread says once that it resumed on another
// replica, naming the killed one (from) and a live one by their replica
// names (an owner id starts with runs.replica).
func checkThreads(t *testing.T, stub *slackstub.Server, all []runs.Run, victim map[string]bool, from string, owners []string) {
	t.Helper()
	waitThreads(t, stub, len(all), "close/finished", 90*time.Second)
	if n := len(parents(stub)); n != haAlerts {
		t.Errorf("%d thread parents, want %d", n, haAlerts)
	}
	for _, r := range all {
		m := threadOf(t, stub, r.ID)
		keys := replyKeys(m)
		want := []string{"step/ha/first", "step/ha/hold", "step/ha/last", "close/finished"}
		if !victim[r.ID] {
			checkOnce(t, keys, want...)
			if slices.Contains(keys, "run/resumed/1") {
				t.Errorf("run %s never stopped, yet its thread says it resumed: %v", r.ID, keys)
			}
			continue
		}
		checkOnce(t, keys, append(want, "run/resumed/1")...)
		i := slices.Index(keys, "run/resumed/1")
		if i < 0 {
			continue // checkOnce said it is missing
		}
		text := m.Replies[i].Text
		named := false
		was, _, _ := strings.Cut(from, "/")
		for _, o := range owners {
			now, _, _ := strings.Cut(o, "/")
			named = named || (now != was && strings.Contains(text, "resumed by replica "+now+" after "+was+" stopped (kill or crash) — 1st resume"))
		}
		if !named {
			t.Errorf("run %s: the resume's reply %q does not say it resumed on another replica than %s", r.ID, text, from)
		}
	}
}

// checkResolutions waits for every thread to show its resolution and checks
// each shows it once, and the runs say resolved. It returns how many threads
// show a resolution.
func checkResolutions(t *testing.T, stub *slackstub.Server, d *daemon, all []runs.Run) int {
	t.Helper()
	waitThreads(t, stub, len(all), "close/resolved", 90*time.Second)
	n := 0
	for _, r := range all {
		keys := replyKeys(threadOf(t, stub, r.ID))
		checkOnce(t, keys, "close/resolved")
		if slices.Contains(keys, "close/resolved") {
			n++
		}
	}
	got := d.runsN(t, haAlertname)
	for _, r := range got {
		if r.ResolvedAt == nil {
			t.Errorf("run %s not resolved", r.ID)
		}
	}
	if len(got) != haAlerts {
		t.Errorf("%d runs after the resolutions, want %d", len(got), haAlerts)
	}
	return n
}

// quantiles are the median and the maximum of ds (0 for none).
func quantiles(ds []time.Duration) (p50, pmax time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2], s[len(s)-1]
}
