package daemon

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/vllmsim"
	"github.com/autocapture/autocapture/vocab"
)

// Tier 3's faults with the real daemon binary against a real vllmsim (the
// harness is serve_profile_harness_test.go): what reaches the server, what
// the run records, what the kill switches do. Bounds on waits are liveness
// bounds; measured delays are logged, and asserted only against what would
// show the wrong behaviour (a stop "at once" against one at the frame's end).

// TestServeProfileFaultResolvedMidFrame: the alert resolves during a 30 s
// frame → stop_profile reaches the sim at once, the tier-1 evidence and the
// partial profile (the files the stop wrote) are kept, the profile step is
// cancelled, the run ends, the lease is released and the sim saw no
// protocol violation.
func TestServeProfileFaultResolvedMidFrame(t *testing.T) {
	t.Parallel()
	const frame = 30 * time.Second
	sim := startPFSim(t, pfSimOpts{})
	d := startPFDaemon(t, pfPlaybook(pfStep{Dir: sim.Dir, Duration: frame, StopTimeout: 30 * time.Second}), time.Second, 10*time.Second)
	startsAt := time.Now().Add(-time.Minute)
	id := pfFire(t, d, "f001f001f001f001", sim.Inst, startsAt)
	sim.waitRecording(t)
	time.Sleep(time.Second) // a few engine iterations into the frame
	resolved := time.Now()  // the stop may reach the sim before the webhook's answer
	if code, b := d.post(t, pfAlert("f001f001f001f001", "resolved", sim.Inst, startsAt)); code != 200 {
		t.Fatalf("resolved webhook: %d %s", code, b)
	}
	waitFor(t, frame, "stop_profile after the resolution", func() bool { return sim.count("/stop_profile") > 0 })
	r := pfWaitRun(t, d, id)
	stopLag := sim.arrivals("/stop_profile")[0].Sub(resolved)
	recorded := sim.arrivals("/stop_profile")[0].Sub(sim.arrivals("/start_profile")[0])
	st := sim.profiler(t)
	prof, version := pfMustStep(t, r, "profile"), pfMustStep(t, r, "version")
	t.Logf("stop reached the sim %v after the resolution (frame %v, recorded %v); run %s (%s); profile step %s partial=%v, %d artifacts; sim starts=%d stops=%d files=%d violations=%v",
		stopLag.Round(time.Millisecond), frame, recorded.Round(time.Millisecond), r.Status, r.Reason, prof.Status, prof.Partial,
		len(prof.Artifacts), st.Starts, st.Stops, st.FilesWritten, st.Violations)

	if stopLag > frame/3 {
		t.Errorf("stop_profile reached the sim %v after the resolution: want at once, not near the frame's end (%v)", stopLag, frame)
	}
	if prof.Status != vocab.StatusCancelled || !prof.Partial {
		t.Errorf("profile step %s partial=%v (%s): want cancelled with its partial result", prof.Status, prof.Partial, pfText(prof))
	}
	if cut, _ := prof.Findings["cut_short"].(string); !strings.Contains(cut, "resolved") {
		t.Errorf("profile cut_short %q: want the resolution named", cut)
	}
	if version.Status != vocab.StatusSucceeded || len(version.Artifacts) == 0 {
		t.Errorf("tier-1 step %s with %d artifacts: want its evidence kept", version.Status, len(version.Artifacts))
	}
	if len(st.Files) == 0 {
		t.Fatal("the sim wrote no files on the stop")
	}
	kept := pfArtifacts(prof)
	for _, f := range st.Files {
		if !kept[filepath.Base(f)] {
			t.Errorf("file %s the stop wrote is not among the profile's artifacts %v", filepath.Base(f), kept)
		}
	}
	if !pfFinished(r.Status) || r.Status == vocab.StatusSucceeded {
		t.Errorf("run %s: want a final status that is not succeeded (the profile was cut)", r.Status)
	}
	if st.Starts != 1 || st.Stops != 1 {
		t.Errorf("sim starts=%d stops=%d, want one each", st.Starts, st.Stops)
	}
	sim.violations(t, nil)
	if ps := pfStatus(t, d); len(ps.Leases) != 0 {
		t.Errorf("leases after the run: %+v, want none", ps.Leases)
	}
}

// TestServeProfileFaultHangingStop: stop_profile hangs (12 s) past the step's
// stop_timeout (3 s) → the step ends about stop_timeout after the frame,
// failed and saying the target stays leased; GET /api/v1/profiling shows the
// lease stop_failed; a second alert for the target is skipped as busy with no
// second start; once the hang is over the sweeper's retried stop is answered
// and releases the target, and with the fault cleared a third alert captures.
//
// The sim alone answers a stop that arrives during a flush at once (and
// counts it stop_while_idle); vLLM's engine core serves one profile call at a
// time, so the harness makes stops wait for the hung one (SerialStops).
func TestServeProfileFaultHangingStop(t *testing.T) {
	t.Parallel()
	const frame, stopTimeout, hang = 2 * time.Second, 3 * time.Second, 12 * time.Second
	sim := startPFSim(t, pfSimOpts{Faults: vllmsim.ProfilerFaults{StopHang: hang}, SerialStops: true})
	d := startPFDaemon(t, pfPlaybook(pfStep{Dir: sim.Dir, Duration: frame, StopTimeout: stopTimeout, ContinueOnError: true}),
		time.Second, time.Second)
	a := pfWaitRun(t, d, pfFire(t, d, "f002f002f002f0a1", sim.Inst, time.Now().Add(-time.Minute)))
	prof := pfMustStep(t, a, "profile")
	firstStop := sim.arrivals("/stop_profile")[0]
	bounded := prof.FinishedAt.Sub(firstStop)
	held, heldAt := pfStatus(t, d), time.Since(firstStop)
	t.Logf("hung stop: the step ended %v after its stop was sent (stop_timeout %v, hang %v): %s (%s) %q; leases %+v",
		bounded.Round(time.Millisecond), stopTimeout, hang, prof.Status, prof.Reason, prof.Summary, held.Leases)
	if bounded > hang-2*time.Second {
		t.Errorf("the step ended %v after its stop was sent: want it bounded by stop_timeout %v, not the hang %v", bounded, stopTimeout, hang)
	}
	if prof.Status != vocab.StatusFailed || prof.Reason != "timeout" || !strings.Contains(prof.Summary, "stays leased") {
		t.Errorf("profile step %s (%s) %q: want failed on the timeout, saying the target stays leased", prof.Status, prof.Reason, pfText(prof))
	}
	if len(held.Leases) != 1 || held.Leases[0].State != "stop_failed" || held.Leases[0].RunID != a.ID {
		t.Fatalf("leases %v after the hung stop was sent (hang %v): %+v, want run %s's stop_failed",
			heldAt.Round(time.Millisecond), hang, held.Leases, a.ID)
	}

	b := pfWaitRun(t, d, pfFire(t, d, "f002f002f002f0b2", sim.Inst, time.Now().Add(-time.Minute)))
	busy := pfMustStep(t, b, "profile")
	decided := busy.FinishedAt.Sub(firstStop)
	t.Logf("second alert while leased, its step decided %v after the first stop (hang %v): %s %q; sim starts=%d",
		decided.Round(time.Millisecond), hang, busy.Status, busy.Reason, sim.count("/start_profile"))
	if busy.Status != vocab.StatusSkipped || !strings.HasPrefix(busy.Reason, "busy: ") || busy.Findings["refused"] != "busy" ||
		!strings.Contains(pfText(busy), a.ID) || !strings.Contains(pfText(busy), "stays leased") {
		premise := "" // a machine too slow for the premise says so, apart from a wrong answer
		if decided >= hang {
			premise = " (it came after the hang was over: the hang is too short for this machine)"
		}
		t.Errorf("second alert's profile step %s %q: want skipped as busy, naming run %s's failed stop%s", busy.Status, pfText(busy), a.ID, premise)
	}
	if n := sim.count("/start_profile"); n != 1 {
		t.Errorf("sim got %d start_profile, want 1 (no second start while the stop hangs)", n)
	}

	waitFor(t, hang+time.Minute, "the sweeper to release the target once the hang is over", func() bool { return len(pfStatus(t, d).Leases) == 0 })
	released := time.Now()
	rp := pfRunProfile(t, d, a.ID)
	t.Logf("released %v after the first stop (hang %v); %d stop_profile calls arrived; run %s events %s",
		released.Sub(firstStop).Round(time.Millisecond), hang, sim.count("/stop_profile"), a.ID, pfEvents(rp))
	if released.Sub(firstStop) < hang {
		t.Errorf("the target was released %v after the first stop, before the hang (%v) was over", released.Sub(firstStop), hang)
	}
	if ev := pfEvents(rp); !strings.Contains(ev, "stop_failed") || !strings.Contains(ev, "stopped(sweeper") {
		t.Errorf("run %s events %s: want the failed stop, then the sweeper's answered one", a.ID, ev)
	}

	if code, body := doRaw(t, mustRequest(t, "POST", sim.URL+"/admin/profiler/faults", `{}`)); code != 200 {
		t.Fatalf("clear the fault: %d %s", code, body)
	}
	c := pfWaitRun(t, d, pfFire(t, d, "f002f002f002f0c3", sim.Inst, time.Now().Add(-time.Minute)))
	if s := pfMustStep(t, c, "profile"); s.Status != vocab.StatusSucceeded || len(s.Artifacts) == 0 {
		t.Errorf("third alert's profile step %s (%s) with %d artifacts: want a capture once the target is free", s.Status, pfText(s), len(s.Artifacts))
	}
	st := sim.profiler(t)
	t.Logf("sim starts=%d stops=%d (arrived: %d) violations=%v", st.Starts, st.Stops, sim.count("/stop_profile"), st.Violations)
	if st.Starts != 2 {
		t.Errorf("sim starts=%d, want 2 (the hung capture and the one after the release)", st.Starts)
	}
	// The sweeper's answered retry came after the hung stop had flushed: the
	// server counts it as a stop while idle, the price of never leaving a
	// recording whose stop went unanswered.
	sim.violations(t, map[string]int{vllmsim.ViolationStopWhileIdle: 1})
}

// TestServeProfileFaultStuckLeaseCleared: a stop that hangs beyond the test
// leaves the target stop_failed (the sweeper's retries time out too); the
// operator's DELETE /api/v1/profiling/leases?target= releases it, audited
// with who asked.
func TestServeProfileFaultStuckLeaseCleared(t *testing.T) {
	t.Parallel()
	sim := startPFSim(t, pfSimOpts{Faults: vllmsim.ProfilerFaults{StopHang: 10 * time.Minute}, SerialStops: true})
	d := startPFDaemon(t, pfPlaybook(pfStep{Dir: sim.Dir, Duration: time.Second, StopTimeout: 2 * time.Second, ContinueOnError: true}),
		time.Second, time.Second)
	a := pfWaitRun(t, d, pfFire(t, d, "f003f003f003f003", sim.Inst, time.Now().Add(-time.Minute)))
	time.Sleep(3 * time.Second) // a few sweeper retries, each timing out behind the hung stop
	held := pfStatus(t, d)
	if len(held.Leases) != 1 || held.Leases[0].State != "stop_failed" {
		t.Fatalf("leases: %+v, want one stop_failed", held.Leases)
	}
	code, b := pfAPI(t, d, "DELETE", "/api/v1/profiling/leases?target="+sim.URL, "")
	rp := pfRunProfile(t, d, a.ID)
	t.Logf("clear: %d %s; leases after %+v; events %s; stop_profile arrivals %d", code, b, pfStatus(t, d).Leases, pfEvents(rp), sim.count("/stop_profile"))
	if code != 200 {
		t.Fatalf("DELETE lease: %d %s", code, b)
	}
	if ls := pfStatus(t, d).Leases; len(ls) != 0 {
		t.Errorf("leases after the clear: %+v, want none", ls)
	}
	if !strings.Contains(pfEvents(rp), "cleared("+pfOperator+")") {
		t.Errorf("events %s: want the clear audited as %s", pfEvents(rp), pfOperator)
	}
	if code, _ := pfAPI(t, d, "DELETE", "/api/v1/profiling/leases?target="+sim.URL, ""); code != 404 {
		t.Errorf("second clear: %d, want 404 (nothing holds the target)", code)
	}
	if n := sim.count("/start_profile"); n != 1 {
		t.Errorf("sim got %d start_profile, want 1", n)
	}
}

// TestServeProfileFaultUnarmed: a server without a profiler → exactly one
// start_profile (404), one finding saying how to arm it, no retry and no
// stop; with continue_on_error the run is partial, not failed.
func TestServeProfileFaultUnarmed(t *testing.T) {
	t.Parallel()
	sim := startPFSim(t, pfSimOpts{Unarmed: true})
	d := startPFDaemon(t, pfPlaybook(pfStep{Dir: t.TempDir(), Duration: 2 * time.Second, StopTimeout: 5 * time.Second, ContinueOnError: true}),
		time.Second, time.Second)
	r := pfWaitRun(t, d, pfFire(t, d, "f004f004f004f004", sim.Inst, time.Now().Add(-time.Minute)))
	time.Sleep(2 * time.Second) // room for a retry, were there one
	prof := pfMustStep(t, r, "profile")
	t.Logf("unarmed: start_profile %d, stop_profile %d; run %s (%s), attempts %d; step %s (%s) findings armed=%v how_to_arm=%q",
		sim.count("/start_profile"), sim.count("/stop_profile"), r.Status, r.Reason, r.Attempts, prof.Status, prof.Reason,
		prof.Findings["armed"], prof.Findings["how_to_arm"])
	if n := sim.count("/start_profile"); n != 1 {
		t.Errorf("start_profile sent %d times, want exactly 1 (no retry of a 404)", n)
	}
	if n := sim.count("/stop_profile"); n != 0 {
		t.Errorf("stop_profile sent %d times, want 0 (nothing was recording)", n)
	}
	how, _ := prof.Findings["how_to_arm"].(string)
	if prof.Status != vocab.StatusFailed || prof.Reason != "upstream-4xx" || prof.Findings["armed"] != false || !strings.Contains(how, "--profiler-config") {
		t.Errorf("profile step %s (%s) %v: want failed upstream-4xx with armed=false and how to arm it", prof.Status, prof.Reason, prof.Findings)
	}
	if r.Status != vocab.StatusPartial || r.Attempts != 1 {
		t.Errorf("run %s after %d attempt(s): want partial (tier 1 succeeded, the profile continue_on_error) after one", r.Status, r.Attempts)
	}
}

// TestServeProfileFaultUnarmedLeaseReleased: after the 404 the target is
// free at once, and stays so: nothing holds it, and no stop_profile is ever
// sent to a server that never recorded (the sweeper takes a lease left
// "recording" for a recording whose owner is gone once its hold, 15 s,
// passes: it would send stop_profile, get 404 and retry for ever, holding
// the target and a slot of profiling.max_concurrent).
func TestServeProfileFaultUnarmedLeaseReleased(t *testing.T) {
	t.Parallel()
	sim := startPFSim(t, pfSimOpts{Unarmed: true})
	d := startPFDaemon(t, pfPlaybook(pfStep{Dir: t.TempDir(), Duration: 2 * time.Second, StopTimeout: 5 * time.Second, ContinueOnError: true}),
		time.Second, time.Second)
	r := pfWaitRun(t, d, pfFire(t, d, "f008f008f008f008", sim.Inst, time.Now().Add(-time.Minute)))
	right := pfStatus(t, d)
	time.Sleep(18 * time.Second) // past the step's lease hold (15 s) and a sweep
	later := pfStatus(t, d)
	t.Logf("run %s; leases right after: %+v; 18 s later: %+v (active %d); stop_profile sent %d",
		r.Status, right.Leases, later.Leases, later.Budget.Active, sim.count("/stop_profile"))
	if len(right.Leases) != 0 {
		t.Errorf("the unarmed target is still leased after its run: %+v (runner Release refuses a lease in state recording)", right.Leases)
	}
	if n := sim.count("/stop_profile"); n != 0 || len(later.Leases) != 0 {
		t.Errorf("18 s later: %d stop_profile sent to a server that never recorded, leases %+v: want none", n, later.Leases)
	}
}

// TestServeProfileFaultPaused: profiling paused through the API → the step is
// skipped "paused by <operator> at …: deploy" and nothing starts; resumed →
// the next alert (another fingerprint) captures.
func TestServeProfileFaultPaused(t *testing.T) {
	t.Parallel()
	sim := startPFSim(t, pfSimOpts{})
	d := startPFDaemon(t, pfPlaybook(pfStep{Dir: sim.Dir, Duration: time.Second, StopTimeout: 10 * time.Second}), time.Second, time.Second)
	if code, b := pfAPI(t, d, "POST", "/api/v1/profiling/pause", `{"reason":"deploy"}`); code != 200 {
		t.Fatalf("pause: %d %s", code, b)
	}
	a := pfWaitRun(t, d, pfFire(t, d, "f005f005f005f0a1", sim.Inst, time.Now().Add(-time.Minute)))
	skipped := pfMustStep(t, a, "profile")
	t.Logf("paused: run %s, profile %s %q, start_profile %d", a.Status, skipped.Status, skipped.Reason, sim.count("/start_profile"))
	if skipped.Status != vocab.StatusSkipped || !strings.HasPrefix(skipped.Reason, "paused: paused by "+pfOperator) ||
		skipped.Findings["refused"] != "paused" || !strings.Contains(pfText(skipped), ": deploy") {
		t.Errorf("profile step while paused %s %q: want skipped, paused by %s with the reason", skipped.Status, pfText(skipped), pfOperator)
	}
	if n := sim.count("/start_profile"); n != 0 {
		t.Fatalf("start_profile sent %d times while paused", n)
	}
	if code, b := pfAPI(t, d, "POST", "/api/v1/profiling/resume", ""); code != 200 {
		t.Fatalf("resume: %d %s", code, b)
	}
	b := pfWaitRun(t, d, pfFire(t, d, "f005f005f005f0b2", sim.Inst, time.Now().Add(-time.Minute)))
	prof := pfMustStep(t, b, "profile")
	st := pfStatus(t, d)
	t.Logf("resumed by %s: run %s, profile %s with %d artifacts, start_profile %d", st.ResumedBy, b.Status, prof.Status, len(prof.Artifacts), sim.count("/start_profile"))
	if prof.Status != vocab.StatusSucceeded || len(prof.Artifacts) == 0 || sim.count("/start_profile") != 1 {
		t.Errorf("after resume: profile %s (%s) with %d artifacts, %d starts: want one capture", prof.Status, pfText(prof), len(prof.Artifacts), sim.count("/start_profile"))
	}
	if st.Paused || st.ResumedBy != pfOperator {
		t.Errorf("status %+v: want resumed by %s", st, pfOperator)
	}
	sim.violations(t, nil)
}

// TestServeProfileFaultCooldown: a second firing for the same target inside
// the step's cooldown → skipped with the cooldown and when it ends (the first
// start + cooldown), no second start.
func TestServeProfileFaultCooldown(t *testing.T) {
	t.Parallel()
	const cooldown = 10 * time.Minute
	sim := startPFSim(t, pfSimOpts{})
	d := startPFDaemon(t, pfPlaybook(pfStep{Dir: sim.Dir, Duration: time.Second, StopTimeout: 10 * time.Second, Cooldown: cooldown}), time.Second, time.Second)
	a := pfWaitRun(t, d, pfFire(t, d, "f006f006f006f0a1", sim.Inst, time.Now().Add(-time.Minute)))
	if s := pfMustStep(t, a, "profile"); s.Status != vocab.StatusSucceeded {
		t.Fatalf("first capture %s (%s)", s.Status, pfText(s))
	}
	started := sim.arrivals("/start_profile")[0]
	b := pfWaitRun(t, d, pfFire(t, d, "f006f006f006f0b2", sim.Inst, time.Now().Add(-time.Minute)))
	s := pfMustStep(t, b, "profile")
	t.Logf("inside the cooldown: %s %q; start_profile %d", s.Status, s.Reason, sim.count("/start_profile"))
	if s.Status != vocab.StatusSkipped || !strings.HasPrefix(s.Reason, "cooldown: ") || s.Findings["refused"] != "cooldown" ||
		!strings.Contains(pfText(s), "cooldown "+cooldown.String()) {
		t.Fatalf("second firing's profile step %s %q: want skipped for the cooldown", s.Status, pfText(s))
	}
	_, next, ok := strings.Cut(pfText(s), "next from ")
	if !ok {
		t.Fatalf("skip %q does not say when the cooldown ends", pfText(s))
	}
	ends, err := time.Parse("2006-01-02T15:04:05.000Z07:00", strings.Fields(next)[0])
	if err != nil {
		t.Fatalf("cooldown end %q: %v", next, err)
	}
	if off := ends.Sub(started.Add(cooldown)); off < -5*time.Second || off > 5*time.Second {
		t.Errorf("cooldown ends %v, want the first start (%v) + %v", ends, started, cooldown)
	}
	if n := sim.count("/start_profile"); n != 1 {
		t.Errorf("start_profile sent %d times, want 1 (no start inside the cooldown)", n)
	}
	sim.violations(t, nil)
}

// TestServeProfileFaultOperatorStop: POST /api/v1/runs/{id}/stop-profile
// during a 30 s frame → stop_profile at once, the step says an operator (by
// name) asked, and the files are collected. Clearing the live lease instead
// is refused (409).
func TestServeProfileFaultOperatorStop(t *testing.T) {
	t.Parallel()
	const frame = 30 * time.Second
	sim := startPFSim(t, pfSimOpts{})
	d := startPFDaemon(t, pfPlaybook(pfStep{Dir: sim.Dir, Duration: frame, StopTimeout: 30 * time.Second}), time.Second, 10*time.Second)
	id := pfFire(t, d, "f007f007f007f007", sim.Inst, time.Now().Add(-time.Minute))
	sim.waitRecording(t)
	time.Sleep(time.Second)
	if code, b := pfAPI(t, d, "DELETE", "/api/v1/profiling/leases?target="+sim.URL, ""); code != 409 {
		t.Errorf("clearing a live lease: %d %s, want 409 (only a failed stop's lease may be cleared)", code, b)
	}
	asked := time.Now()
	code, b := pfAPI(t, d, "POST", "/api/v1/runs/"+id+"/stop-profile", "")
	if code != 200 {
		t.Fatalf("stop-profile: %d %s", code, b)
	}
	waitFor(t, frame, "stop_profile after the operator's request", func() bool { return sim.count("/stop_profile") > 0 })
	lag := sim.arrivals("/stop_profile")[0].Sub(asked)
	r := pfWaitRun(t, d, id)
	prof := pfMustStep(t, r, "profile")
	st := sim.profiler(t)
	cut, _ := prof.Findings["cut_short"].(string)
	t.Logf("operator stop reached the sim %v after the request (frame %v); run %s; profile %s, cut_short %q, %d artifacts; sim files %d; events %s",
		lag.Round(time.Millisecond), frame, r.Status, prof.Status, cut, len(prof.Artifacts), st.FilesWritten, pfEvents(pfRunProfile(t, d, id)))
	if lag > frame/3 {
		t.Errorf("stop_profile reached the sim %v after the operator asked: want at once, not near the frame's end (%v)", lag, frame)
	}
	if prof.Status != vocab.StatusSucceeded || !strings.Contains(cut, "an operator asked to stop") || !strings.Contains(cut, pfOperator) {
		t.Errorf("profile step %s, cut_short %q: want succeeded, saying %s asked to stop", prof.Status, cut, pfOperator)
	}
	kept := pfArtifacts(prof)
	if len(st.Files) == 0 {
		t.Fatal("the sim wrote no files")
	}
	for _, f := range st.Files {
		if !kept[filepath.Base(f)] {
			t.Errorf("file %s is not among the profile's artifacts %v", filepath.Base(f), kept)
		}
	}
	if ev := pfEvents(pfRunProfile(t, d, id)); !strings.Contains(ev, "stop_requested("+pfOperator+")") {
		t.Errorf("events %s: want the stop request audited as %s", ev, pfOperator)
	}
	if st.Starts != 1 || st.Stops != 1 {
		t.Errorf("sim starts=%d stops=%d, want one each", st.Starts, st.Stops)
	}
	sim.violations(t, nil)
}
