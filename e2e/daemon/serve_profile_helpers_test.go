package daemon

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// Helpers over the daemon's API for the tier-3 tests: a run's profile step,
// its lease events and the fleet's profiling status.

// postRun posts body and returns the run id of its (first) alert.
func postRun(t *testing.T, d *daemon, body []byte) string {
	t.Helper()
	code, b := d.post(t, body)
	id := runID(b)
	if code != 200 || id == "" {
		t.Fatalf("webhook to %s: %d %s", d.URL, code, b)
	}
	return id
}

// waitRecording waits until the sim's profiler records.
func waitRecording(t *testing.T, sim *profSim) {
	t.Helper()
	waitFor(t, 60*time.Second, "the sim to record", func() bool { return sim.Sim.Profiler().State == "recording" })
}

// waitFinal waits until run id is in a final status and returns it.
func waitFinal(t *testing.T, d *daemon, id string, timeout time.Duration) runs.Run {
	t.Helper()
	var r runs.Run
	waitFor(t, timeout, "run "+id+" to finish", func() bool {
		r = d.run(t, id)
		return r.Status != vocab.StatusQueued && r.Status != vocab.StatusRunning
	})
	return r
}

// runsN lists up to 500 runs of alertname, newest first.
func (d *daemon) runsN(t *testing.T, alertname string) []runs.Run {
	t.Helper()
	var page runs.Page
	d.getJSON(t, "/api/v1/runs?limit=500&alertname="+alertname, &page)
	return page.Runs
}

// profile is GET /api/v1/runs/{id}/profile: the run's lease and events.
func (d *daemon) profile(t *testing.T, id string) runs.RunProfile {
	t.Helper()
	var p runs.RunProfile
	d.getJSON(t, "/api/v1/runs/"+id+"/profile", &p)
	return p
}

// profiling is GET /api/v1/profiling.
func (d *daemon) profiling(t *testing.T) runs.ProfilingStatus {
	t.Helper()
	var p runs.ProfilingStatus
	d.getJSON(t, "/api/v1/profiling", &p)
	return p
}

func (d *daemon) getJSON(t *testing.T, path string, v any) {
	t.Helper()
	req, _ := http.NewRequest("GET", d.URL+path, nil)
	code, b := d.do(t, req)
	if code != 200 {
		t.Fatalf("GET %s: %d %s", path, code, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, b)
	}
}

// profileStep is the run's one record of the step "profile".
func profileStep(t *testing.T, r runs.Run) executor.StepRecord {
	t.Helper()
	var found []executor.StepRecord
	for _, s := range r.Steps {
		if s.ID == "profile" {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("run %s (%s %s) has %d profile step records, want 1: %+v", r.ID, r.Status, r.Reason, len(found), r.Steps)
	}
	return found[0]
}

// findEvent returns the run's last profile event named name.
func findEvent(p runs.RunProfile, name string) (runs.ProfileEvent, bool) {
	for i := len(p.Events) - 1; i >= 0; i-- {
		if p.Events[i].Event == name {
			return p.Events[i], true
		}
	}
	return runs.ProfileEvent{}, false
}

// eventList is the run's profile events for a log line.
func eventList(p runs.RunProfile) string {
	var out []string
	for _, e := range p.Events {
		s := e.Event + " by " + e.Actor
		if e.Detail != "" {
			s += " (" + e.Detail + ")"
		}
		out = append(out, s)
	}
	return strings.Join(out, "; ")
}

// recordingDeadline is the deadline the lease made durable before the
// start: the "recording" event's "stop by <time>" (the database's clock).
func recordingDeadline(t *testing.T, p runs.RunProfile) time.Time {
	t.Helper()
	e, ok := findEvent(p, "recording")
	if !ok {
		t.Fatalf("no recording event: %s", eventList(p))
	}
	at, err := time.Parse("2006-01-02T15:04:05.000Z07:00", strings.TrimPrefix(e.Detail, "stop by "))
	if err != nil {
		t.Fatalf("recording event %q: %v", e.Detail, err)
	}
	return at
}

// checkOneStop wants exactly one /stop_profile at the sim, arrived by
// deadline + one sweep interval + slack; it returns its arrival.
func checkOneStop(t *testing.T, sim *profSim, deadline time.Time) time.Time {
	t.Helper()
	stops := sim.callsTo("/stop_profile")
	if len(stops) != 1 {
		t.Fatalf("sim got %d stops, want 1: %+v", len(stops), stops)
	}
	if late := stops[0].At.Sub(deadline); late > haSweep+haSlack {
		t.Errorf("the stop arrived %v after the deadline %s, want within one sweep interval (%v) + %v slack",
			late.Round(time.Millisecond), deadline.Format(time.RFC3339Nano), haSweep, haSlack)
	}
	return stops[0].At
}

// leaseOwner picks, of ds, the daemon whose process holds the lease (owner
// "host/pid/…") and the other one.
func leaseOwner(t *testing.T, ds []*daemon, owner string) (holder, other *daemon) {
	t.Helper()
	parts := strings.Split(owner, "/")
	if len(parts) < 3 {
		t.Fatalf("lease owner %q: want host/pid/id", owner)
	}
	pid, err := strconv.Atoi(parts[len(parts)-2])
	if err != nil {
		t.Fatalf("lease owner %q: %v", owner, err)
	}
	for i, d := range ds {
		if d.Proc.Pid() == pid {
			return d, ds[1-i]
		}
	}
	t.Fatalf("lease owner %q is neither replica (pids %d, %d)", owner, ds[0].Proc.Pid(), ds[1].Proc.Pid())
	return nil, nil
}

// checkCollected wants the step to have stored files the sim wrote.
func checkCollected(t *testing.T, sim *profSim, step executor.StepRecord) {
	t.Helper()
	written := map[string]bool{}
	for _, f := range sim.admin(t).Files {
		written[filepath.Base(f)] = true
	}
	names, _ := step.Findings["files"].([]any)
	if len(names) == 0 || len(names) != len(written) {
		t.Fatalf("profile step collected %v, want the sim's %d files: %v", names, len(written), step.Findings)
	}
	stored := map[string]bool{}
	for _, a := range step.Artifacts {
		stored[filepath.Base(a.Name)] = true
	}
	for _, n := range names {
		s, _ := n.(string)
		if !written[filepath.Base(s)] || !stored[filepath.Base(s)] {
			t.Errorf("collected %q: written by the sim %v, stored %v", s, written[filepath.Base(s)], stored[filepath.Base(s)])
		}
	}
}

// executedBy names the replica of ds ("0", "1", …) whose log says it started
// run id, "?" when none does.
func executedBy(ds []*daemon, id string) string {
	var on []string
	for i, d := range ds {
		if strings.Contains(d.Proc.Logs(), "Run started.\t{\"run\": \""+id+"\"") {
			on = append(on, strconv.Itoa(i))
		}
	}
	if len(on) == 0 {
		return "?"
	}
	return strings.Join(on, "+")
}
