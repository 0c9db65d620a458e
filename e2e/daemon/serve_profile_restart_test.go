package daemon

import (
	"context"
	"encoding/json"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/capture/profile"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vllmsim"
	"github.com/autocapture/autocapture/vocab"
)

// TestServeProfileLateRestart: kill -9 of the daemon recording a frame, and
// a restart that comes after the recording's deadline and after the run's
// lease (runs.lease_timeout): a killed pod in CrashLoopBackOff. The restarted
// daemon's sweeper stops the orphaned recording while its reaper resumes the
// run, so the resumed profile step meets the sweeper's claim on its own
// lease. It waits for that stop to be answered, takes the swept lease over
// and collects the frame's files: the step succeeds with the files stored
// and analysed (the report's GPU time is what the sim wrote), the sim saw
// one start and one stop with no violation, no lease is left, and the thread
// says the profile was recovered after a restart. (Before, the resumed step
// was skipped "busy: the sweeper is stopping the earlier attempt's
// recording", the run succeeded without a profile, and the sweeper released
// the target with the files left on the server: 7 of 7 tries.)
//
// Rows: a 5 s run lease with the restart at deadline + 4 s (the issue's
// report), one past deadline + lease, and the default 20 s lease with the
// restart at deadline + 22 s.
func TestServeProfileLateRestart(t *testing.T) {
	for _, tc := range []struct {
		name        string
		lease, late time.Duration
	}{
		{"lease-5s-restart-deadline+4s", 5 * time.Second, 4 * time.Second},
		{"lease-5s-restart-deadline+lease+3s", 5 * time.Second, 8 * time.Second},
		{"lease-20s-restart-deadline+22s", 20 * time.Second, 22 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) { lateRestart(t, tc.lease, tc.late) })
	}
}

// lateRestart kills the daemon 1 s into a 5 s frame and restarts it late
// after the recording's deadline, with runs.lease_timeout lease.
func lateRestart(t *testing.T, lease, late time.Duration) {
	const frame = 5 * time.Second
	// The recording runs until the restarted daemon's sweeper stops it:
	// nothing can stop it sooner, so the sim allows that (and a slow start).
	sim := startProfSim(t, vllmsim.Options{Seed: 7, ProfilerFlushDelay: 300 * time.Millisecond, ProfilerLayers: 2,
		ProfilerMaxRecording: frame + late + 20*time.Second})
	o := &daemonOpts{Token: "late", Playbooks: profilePlaybook("LateRestart", frame), Profiling: haProfiling(""),
		LeaseTimeout: lease}
	d := startDaemon(t, o)
	id := postRun(t, d, alertsBody(profileAlert("LateRestart", "1a7e000000000001", sim, time.Now().Add(-time.Minute))))
	waitRecording(t, sim)
	time.Sleep(time.Second) // mid-frame
	deadline := recordingDeadline(t, d.profile(t, id))
	d.Proc.Kill9()
	killed := time.Now()

	time.Sleep(time.Until(deadline.Add(late)))
	restarted := time.Now()
	d2 := startDaemon(t, o) // same port, storage and database
	r := waitFinal(t, d2, id, 90*time.Second)
	prof := d2.profile(t, id)
	step := profileStep(t, r)
	t.Logf("killed %v before the deadline, restarted %v after it (run lease %v); run %s (%s) after %d resume(s) %v after the restart; profile %s %q; events: %s",
		deadline.Sub(killed).Round(time.Millisecond), restarted.Sub(deadline).Round(time.Millisecond), lease,
		r.Status, r.Reason, r.Resumed, time.Since(restarted).Round(time.Millisecond), step.Status, step.Summary, eventList(prof))

	st := checkClean(t, sim)
	if st.Starts != 1 || len(sim.callsTo("/start_profile")) != 1 || st.Stops < 1 {
		t.Errorf("sim saw %d starts and %d stops, want exactly 1 start (no second frame) and a stop", st.Starts, st.Stops)
	}
	if r.Status != vocab.StatusSucceeded || r.Resumed < 1 {
		t.Errorf("run %s (%s) resumed %d, want succeeded after a resume", r.Status, r.Reason, r.Resumed)
	}
	if step.Status != vocab.StatusSucceeded || step.Findings["resumed"] != vocab.LeaseStopped {
		t.Fatalf("profile step %s (%s %s), findings %v: want succeeded with resumed=stopped", step.Status, step.Reason, step.Error, step.Findings)
	}
	if e, ok := findEvent(prof, "stopped"); !ok || !strings.HasPrefix(e.Actor, "sweeper ") {
		t.Errorf("want the sweeper's answered stop: %s", eventList(prof))
	}
	if e, ok := findEvent(prof, "resumed"); !ok || e.Detail != "state stopped" {
		t.Errorf("want the resumed attempt to take the swept lease over: %s", eventList(prof))
	}
	if e, ok := findEvent(prof, "released"); !ok || strings.HasPrefix(e.Actor, "sweeper ") {
		t.Errorf("want the resumed step to release the lease after collecting, not the sweeper: %s", eventList(prof))
	}
	checkCollected(t, sim, step)
	checkRecoveredReport(t, o, sim, step)
	if ps := d2.profiling(t); len(ps.Leases) != 0 {
		t.Errorf("leases left: %+v", ps.Leases)
	}
	if prof.Lease != nil {
		t.Errorf("the run still holds a lease: %+v", *prof.Lease)
	}
	if !strings.Contains(step.Summary, "recovered after a restart") {
		t.Errorf("profile summary %q: want it to say the profile was recovered after a restart", step.Summary)
	}
	// The reply goes out through the outbox, after the run's record.
	waitFor(t, 30*time.Second, "the thread's profile reply to say the profile was recovered after a restart", func() bool {
		return threadSays(d2.Proc.Logs(), id, "· step profile (profile, tier 3) succeeded", "recovered after a restart")
	})
}

// checkRecoveredReport reads the step's profile-report.json from the
// daemon's local store: the analysis has the GPU time the sim wrote.
func checkRecoveredReport(t *testing.T, o *daemonOpts, sim *profSim, step executor.StepRecord) {
	t.Helper()
	var key string
	for _, a := range step.Artifacts {
		if filepath.Base(a.Name) == "profile-report.json" {
			key = a.Key
		}
	}
	if key == "" {
		t.Fatalf("no profile-report.json among %+v", step.Artifacts)
	}
	store, err := storage.NewLocal(filepath.Join(o.Dir, "artifacts"))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := store.Open(context.Background(), key)
	if err != nil {
		t.Fatalf("open %s: %v", key, err)
	}
	defer rc.Close()
	var rep profile.Report
	if err := json.NewDecoder(rc).Decode(&rep); err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	truth := sim.admin(t).LastCapture
	if rep.Analysis == nil || rep.Analysis.KernelUS <= 0 || truth.GPUus <= 0 ||
		math.Abs(rep.Analysis.KernelUS-truth.GPUus) > 1e-3*float64(truth.Kernels) {
		var got float64
		if rep.Analysis != nil {
			got = rep.Analysis.KernelUS
		}
		t.Errorf("the report's analysis read %.0f µs of GPU time; the sim wrote %.0f µs (%d kernels)", got, truth.GPUus, truth.Kernels)
	}
	if !strings.Contains(rep.Recovered, "recovered after a restart") {
		t.Errorf("the report's recovered %q: want it to say so", rep.Recovered)
	}
}

// threadSays reports whether the console thread of run id has a block whose
// first line contains head and whose body contains want.
func threadSays(logs, id, head, want string) bool {
	for _, block := range strings.Split(logs, "── run "+id+" ")[1:] {
		first, body, _ := strings.Cut(block, "\n")
		if !strings.Contains(first, head) {
			continue
		}
		if end := strings.Index(body, "── "); end >= 0 {
			body = body[:end]
		}
		if strings.Contains(body, want) {
			return true
		}
	}
	return false
}
