package daemon

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vllmsim"
	"github.com/autocapture/autocapture/vocab"
)

// Tier 3 across crashes and replicas, through the real binary and real
// vllmsim profilers: what the servers saw is counted on their side (their
// /admin/profiler and the times their /start_profile and /stop_profile
// arrived), never from the daemon's word.

const (
	// haFrame is the kill test's frame: long enough to kill the daemon inside it.
	haFrame = 20 * time.Second
	// haSweep is profiling.sweep_interval.
	haSweep = time.Second
	// haSlack is what the stop bound allows past deadline + one sweep
	// interval: the owner's stopGrace (1.5 s, runner/profiling/lease.go: a live
	// owner records its stop within it, so the sweeper may not claim
	// sooner), the sweep's own queries and claim, and the stop's trip to the
	// sim, on a shared CI machine under -race.
	haSlack = 1500*time.Millisecond + 2*time.Second
	// haNewRunRoom is how long the swept tests give a new run, between the
	// sweeper's stop and the resume, to be refused busy: it took 0.2-0.4 s at
	// load 8 on 2 cores, and the ~7 s it had before did not suffice at load
	// 22-46. runs.lease_timeout grows by it.
	haNewRunRoom = 20 * time.Second
)

// haProfiling is the profiling: section of these daemons.
func haProfiling(extra string) string {
	return fmt.Sprintf("  sweep_interval: %s\n  stop_timeout: 30s\n", haSweep) + extra
}

// haSim is a sim whose profiler counts a recording longer than frame + one
// sweep interval + slack as a violation (recording_past_limit): the server
// itself holds the daemon to the bound.
func haSim(t *testing.T, frame time.Duration) *profSim {
	return startProfSim(t, vllmsim.Options{Seed: 7, ProfilerFlushDelay: 300 * time.Millisecond, ProfilerLayers: 2,
		ProfilerMaxRecording: frame + haSweep + haSlack})
}

// TestServeProfileHAKill9: kill -9 of the daemon recording a 20 s frame.
// The target gets its stop before deadline + one sweep interval + slack, the
// sim counts no violation of any kind and records nothing, and the run's
// record says what happened:
//
//   - resumed: SQLite, restarted at once: the reaper resumes the run, the
//     resumed step stops the recording first, then collects the files
//     against the listing saved before the start; the run succeeds.
//   - swept: two replicas on PostgreSQL with runs.max_attempts 2 and a run
//     lease that outlasts the frame, the owner killed 1 s into it: the
//     survivor's sweeper stops the orphaned recording once past its
//     deadline, a new run meanwhile is skipped busy, and the run resumed on
//     the survivor collects the frame's files with no second start
//     (sweptAfterKill). swept-late-in-frame kills it 1.5 s before the
//     deadline of a 6 s frame.
func TestServeProfileHAKill9(t *testing.T) {
	t.Run("resumed", func(t *testing.T) {
		sim := haSim(t, haFrame)
		o := &daemonOpts{Token: "ha", Playbooks: profilePlaybook("HAKill", haFrame), Profiling: haProfiling(""), LeaseTimeout: killLease}
		d := startDaemon(t, o)
		id := postRun(t, d, alertsBody(profileAlert("HAKill", "a11ce00000000001", sim, time.Now().Add(-time.Minute))))
		waitRecording(t, sim)
		time.Sleep(time.Second) // mid-frame
		d.Proc.Kill9()
		killed := time.Now()

		d2 := startDaemon(t, o) // same port, storage and database
		r := waitFinal(t, d2, id, 90*time.Second)
		prof := d2.profile(t, id)
		deadline := recordingDeadline(t, prof)
		stop := checkOneStop(t, sim, deadline)
		t.Logf("killed %s before the deadline; restarted; stop arrived %v after the kill, %v before the deadline; run %s after %d resume(s); events: %s",
			deadline.Sub(killed).Round(time.Millisecond), stop.Sub(killed).Round(time.Millisecond),
			deadline.Sub(stop).Round(time.Millisecond), r.Status, r.Resumed, eventList(prof))
		st := checkClean(t, sim)
		if st.Starts != 1 || st.Stops != 1 {
			t.Errorf("sim saw %d starts and %d stops, want 1 and 1", st.Starts, st.Stops)
		}
		step := profileStep(t, r)
		if _, swept := findEvent(prof, "sweeper_stopping"); swept {
			// The restart came after the deadline + stopGrace: the sweeper
			// stopped it first, and the resumed step collects what that
			// frame wrote (the lease waits, stopped, for it).
			if step.Status != vocab.StatusSucceeded || step.Findings["resumed"] != "stopped" {
				t.Errorf("the sweeper stopped the recording, but the step is %s (%s), want succeeded with resumed=stopped", step.Status, step.Reason)
			}
			checkCollected(t, sim, step)
			return
		}
		if r.Status != vocab.StatusSucceeded || r.Resumed != 1 {
			t.Errorf("run %s resumed %d, want succeeded after one resume", r.Status, r.Resumed)
		}
		if step.Status != vocab.StatusSucceeded || step.Findings["resumed"] != "recording" {
			t.Fatalf("profile step %s (%s %s), findings %v: want succeeded with resumed=recording", step.Status, step.Reason, step.Error, step.Findings)
		}
		if _, ok := findEvent(prof, "resumed"); !ok {
			t.Errorf("no resumed event: %s", eventList(prof))
		}
		if e, ok := findEvent(prof, "stopped"); !ok || strings.HasPrefix(e.Actor, "sweeper") {
			t.Errorf("want the resumed step's own stopped event: %s", eventList(prof))
		}
		checkCollected(t, sim, step)
	})

	t.Run("swept", func(t *testing.T) { sweptAfterKill(t, haFrame, time.Second) })
	// Killed 1.5 s before the deadline of a 6 s frame: the stop still comes
	// within the deadline + stopGrace (1.5 s) + one sweep. Before the lease
	// was capped at the deadline it came ~13.5 s late (the step's 15 s hold).
	t.Run("swept-late-in-frame", func(t *testing.T) {
		sweptAfterKill(t, 6*time.Second, 4500*time.Millisecond)
	})
}

// sweptAfterKill: two replicas on PostgreSQL with runs.max_attempts 2, a
// frame recorded by one of them, killed killAfter into it. The run's lease
// (runs.lease_timeout) outlasts the frame, so the other replica's sweeper
// stops the recording first, by deadline + one sweep interval + slack; the
// lease then stays stopped, ownerless, for profiling.collect_window: a new
// run's capture of that server meanwhile is skipped "busy: … stopped by the
// sweeper …" with the finding refused=busy. Then the reaper resumes the run
// on the survivor, and its profile step gets the stopped lease back and
// collects the first frame's files with no new start: the sim sees exactly
// one start and one stop, zero violations, and the resumed step's record has
// the frame's files. (Before, the sweeper released the target at once, and
// the resumed attempt started a second frame on a server that had paged.)
func sweptAfterKill(t *testing.T, frame, killAfter time.Duration) {
	pg := testenv.StartPostgres(t)
	sim := haSim(t, frame)
	// The run resumes lease_timeout after the kill: after the deadline and
	// the sweeper's stop (one sweep + haSlack), with haNewRunRoom for a new
	// run's busy skip in between.
	leaseTimeout := (frame - killAfter + haSweep + haSlack + haNewRunRoom).Round(time.Second)
	mk := func() *daemonOpts {
		return &daemonOpts{Token: "ha", DatabaseURL: pg, Playbooks: profilePlaybook("HASwept", frame),
			Profiling: haProfiling(""), Runs: "  max_attempts: 2\n", LeaseTimeout: leaseTimeout}
	}
	ds := []*daemon{startDaemon(t, mk()), startDaemon(t, mk())}
	id := postRun(t, ds[0], alertsBody(profileAlert("HASwept", "a11ce00000000002", sim, time.Now().Add(-time.Minute))))
	waitRecording(t, sim)
	time.Sleep(killAfter)
	lease := ds[0].profile(t, id).Lease
	if lease == nil {
		t.Fatal("the run holds no lease while its target records")
	}
	owner, survivor := leaseOwner(t, ds, lease.Owner)
	owner.Proc.Kill9()
	killed := time.Now()

	var prof runs.RunProfile
	waitFor(t, frame+30*time.Second, "the sweeper to stop the orphaned recording", func() bool {
		prof = survivor.profile(t, id)
		_, ok := findEvent(prof, "stopped")
		return ok
	})
	swept := time.Now()
	if prof.Lease == nil || prof.Lease.State != "stopped" || prof.Lease.Owner != "" {
		t.Errorf("after the sweeper's stop the lease is %+v, want stopped with no owner (waiting for the resumed attempt)", prof.Lease)
	}
	// A new run meanwhile: the server stays leased for the first run's files.
	other := postRun(t, survivor, alertsBody(profileAlert("HASwept", "a11ce00000000003", sim, time.Now().Add(-time.Minute))))
	ro := waitFinal(t, survivor, other, haNewRunRoom)
	busy := profileStep(t, ro)
	t.Logf("a new run %s finished %v after the sweep (room before the resume %v): profile %s %q", other,
		time.Since(swept).Round(time.Millisecond), haNewRunRoom, busy.Status, busy.Reason)
	if busy.Status != vocab.StatusSkipped || !strings.HasPrefix(busy.Reason, "busy: run "+id+"'s capture on ") ||
		!strings.Contains(busy.Reason, "stopped by the sweeper") || busy.Findings["refused"] != "busy" {
		premise := "" // a machine too slow for the premise says so, apart from a wrong answer
		if e, ok := findEvent(survivor.profile(t, id), "resumed"); ok && e.At.Before(busy.FinishedAt) {
			premise = fmt.Sprintf(" (the run resumed %v after the sweep, before the new run's step: haNewRunRoom is too short for this machine)",
				e.At.Sub(swept).Round(time.Millisecond))
		}
		t.Errorf("the new run's profile step %s %q (findings %v): want skipped busy, naming run %s's swept capture%s",
			busy.Status, busy.Reason, busy.Findings, id, premise)
	}

	r := waitFinal(t, survivor, id, leaseTimeout+60*time.Second)
	prof = survivor.profile(t, id)
	deadline := recordingDeadline(t, prof)
	stop := checkOneStop(t, sim, deadline)
	t.Logf("killed the owner %s before the deadline; the other replica's sweeper stopped it %v after the deadline (bound %v); run %s after %d resume(s): %s; events: %s",
		deadline.Sub(killed).Round(time.Millisecond), stop.Sub(deadline).Round(time.Millisecond), haSweep+haSlack,
		r.Status, r.Resumed, r.Reason, eventList(prof))
	st := checkClean(t, sim)
	if st.Starts != 1 || st.Stops != 1 || len(sim.callsTo("/start_profile")) != 1 {
		t.Errorf("sim saw %d starts and %d stops, want 1 and 1: the resumed attempt must not start a second frame", st.Starts, st.Stops)
	}
	e, ok := findEvent(prof, "sweeper_stopping")
	if !ok || !strings.Contains(e.Detail, "past the deadline") {
		t.Errorf("want the sweeper's stop of a dead owner's recording past its deadline: %s", eventList(prof))
	}
	if e, _ := findEvent(prof, "stopped"); !strings.HasPrefix(e.Actor, "sweeper ") {
		t.Errorf("the stop was answered to %q, want the sweeper", e.Actor)
	}
	if e, ok := findEvent(prof, "resumed"); !ok || e.Detail != "state stopped" {
		t.Errorf("want the resumed attempt to take the stopped lease back: %s", eventList(prof))
	}
	if r.Status != vocab.StatusSucceeded || r.Resumed != 1 {
		t.Errorf("run %s (%s) resumed %d, want succeeded after one resume", r.Status, r.Reason, r.Resumed)
	}
	step := profileStep(t, r)
	if step.Status != vocab.StatusSucceeded || step.Findings["resumed"] != "stopped" {
		t.Fatalf("resumed profile step %s (%s %s), findings %v: want succeeded with resumed=stopped", step.Status, step.Reason, step.Error, step.Findings)
	}
	checkCollected(t, sim, step)
	if ps := survivor.profiling(t); len(ps.Leases) != 0 {
		t.Errorf("leases left: %+v", ps.Leases)
	}
	for result, want := range map[string]float64{"resumed": 1, "refused_busy": 1, "captured": 0} {
		if got := survivor.metric(t, `autocapture_profile_steps_total{result="`+result+`"}`); got != want {
			t.Errorf("survivor's autocapture_profile_steps_total{result=%q} = %v, want %v", result, got, want)
		}
	}
}

// TestServeProfileHATwoReplicas: two replicas on one PostgreSQL, as behind
// an HA pair of Alertmanagers: every alert is posted to both at once. Each
// round two alerts fire on one server (HATwo and HATwoQueue): each alert is
// one run whichever replica took it (runs are keyed by fingerprint and
// start), the two runs execute on different replicas (runs.max_concurrent 1
// each; the test fails if no round did) and contend for the server's lease
// across them, and exactly one captures: the server sees one start and one
// stop, the other run's step is skipped naming the run that holds it, and
// nothing is violated. Three rounds, three servers.
func TestServeProfileHATwoReplicas(t *testing.T) {
	const rounds = 3
	const frame = 3 * time.Second // > the other replica's fetch of the second run
	pg := testenv.StartPostgres(t)
	mk := func() *daemonOpts {
		// One run at a time per replica: the two runs of a round execute
		// on different replicas, so their lease is contended across them.
		return &daemonOpts{Token: "ha", DatabaseURL: pg, Playbooks: profilePlaybook("HATwo.*", frame), Profiling: haProfiling(""),
			Runs: "  max_concurrent: 1\n"}
	}
	ds := []*daemon{startDaemon(t, mk()), startDaemon(t, mk())}
	crossed := 0 // rounds whose two runs ran on different replicas
	for i := range rounds {
		sim := haSim(t, frame)
		starts := time.Now().Add(-time.Minute)
		bodies := [][]byte{
			alertsBody(profileAlert("HATwo", fmt.Sprintf("a11ce0000002%04x", i), sim, starts)),
			alertsBody(profileAlert("HATwoQueue", fmt.Sprintf("a11ce0000003%04x", i), sim, starts)),
		}
		ids := make([][]string, len(bodies)) // [alert][replica]
		var wg sync.WaitGroup
		gate := make(chan struct{})
		for a, body := range bodies {
			ids[a] = make([]string, len(ds))
			for j, d := range ds {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-gate
					ids[a][j] = postRun(t, d, body)
				}()
			}
		}
		close(gate)
		wg.Wait()
		var steps []executor.StepRecord
		for a := range bodies {
			if ids[a][0] != ids[a][1] {
				t.Fatalf("round %d: the replicas accepted alert %d as runs %s and %s, want one", i, a, ids[a][0], ids[a][1])
			}
			r := waitFinal(t, ds[(i+a)%2], ids[a][0], 60*time.Second)
			steps = append(steps, profileStep(t, r))
		}
		st := checkClean(t, sim)
		on := []string{executedBy(ds, ids[0][0]), executedBy(ds, ids[1][0])}
		if on[0] != on[1] {
			crossed++
		}
		t.Logf("round %d: run %s on replica %s: profile %s; run %s on replica %s: profile %s (%s); sim starts %d stops %d files %d",
			i, ids[0][0], on[0], steps[0].Status, ids[1][0], on[1], steps[1].Status, steps[1].Reason+steps[0].Reason,
			st.Starts, st.Stops, st.FilesWritten)
		if st.Starts != 1 || st.Stops != 1 || len(sim.callsTo("/start_profile")) != 1 {
			t.Errorf("round %d: sim saw %d starts and %d stops, want exactly one capture", i, st.Starts, st.Stops)
		}
		won := 0
		for a, s := range steps {
			if s.Status == vocab.StatusSucceeded {
				won = a
			}
		}
		lost := steps[1-won]
		if steps[won].Status != vocab.StatusSucceeded || lost.Status != vocab.StatusSkipped || !strings.HasPrefix(lost.Reason, "busy: ") ||
			!strings.Contains(lost.Reason, "run "+ids[won][0]) {
			t.Errorf("round %d: profile steps %s and %s (%q), want one succeeded and the other skipped naming run %s",
				i, steps[0].Status, steps[1].Status, lost.Reason, ids[won][0])
		}
	}
	t.Logf("%d of %d rounds had their two runs on different replicas", crossed, rounds)
	if crossed == 0 {
		t.Errorf("no round ran its two runs on different replicas: the lease was never contended across them")
	}
	for _, d := range ds {
		if n := len(d.runsN(t, "")); n != 2*rounds {
			t.Errorf("replica %s lists %d runs, want %d", d.URL, n, 2*rounds)
		}
	}
}

// TestServeProfileHABudget: 20 alerts on 20 servers in one webhook, in
// waves, with profiling.max_concurrent 2 and max_per_hour 6 (runs.max_concurrent
// 20, so every run reaches the guard at once). At no moment do more than 2
// servers record, counted from the times the servers saw their starts and
// stops (start's arrival to the stop's answer, flush included) and by
// sampling every sim's profiler state every 20 ms (Sim.Profiler, what GET
// /admin/profiler serves; the end state is read over HTTP); the hour's starts stop at
// exactly 6 (the last wave all skipped for max_per_hour); every other step is
// skipped with a budget reason; no violation anywhere.
//
// Each refused step is skipped, not queued: a wave of 20 at once gets at
// most max_concurrent starts, so reaching max_per_hour takes several waves.
func TestServeProfileHABudget(t *testing.T) {
	const (
		n        = 20
		frame    = time.Second
		maxConc  = 2
		perHour  = 6
		maxWaves = perHour + 1 // at least one start per wave until the hour's budget is spent
	)
	sims := make([]*profSim, n)
	for i := range sims {
		sims[i] = haSim(t, frame)
	}
	d := startDaemon(t, &daemonOpts{Token: "ha", Playbooks: profilePlaybook("HABudget", frame), Runs: "  max_concurrent: 20\n",
		Profiling: haProfiling(fmt.Sprintf("  max_concurrent: %d\n  max_per_hour: %d\n", maxConc, perHour))})

	sampled, samples := 0, 0
	stopSampling := make(chan struct{})
	sampling := make(chan struct{})
	go func() {
		defer close(sampling)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-tick.C:
			}
			rec := 0
			for _, s := range sims {
				if s.Sim.Profiler().State == "recording" {
					rec++
				}
			}
			sampled, samples = max(sampled, rec), samples+1
		}
	}()

	starts, skips, total, lastWave := 0, map[string]int{}, 0, 0
	for wave := 0; starts < perHour || lastWave != n; wave++ {
		if wave == maxWaves {
			t.Fatalf("%d waves and still %d of %d started, the last wave %d skipped for max_per_hour", wave, starts, perHour, lastWave)
		}
		var alerts []string
		for i, s := range sims {
			alerts = append(alerts, profileAlert("HABudget", waveFingerprint(wave, i), s, time.Now().Add(-time.Minute)))
		}
		code, b := d.post(t, alertsBody(alerts...))
		if code != 200 {
			t.Fatalf("wave %d: webhook %d %s", wave, code, b)
		}
		total += n
		var rs []runs.Run
		waitFor(t, 90*time.Second, fmt.Sprintf("wave %d's runs to finish", wave), func() bool {
			rs = d.runsN(t, "HABudget")
			for _, r := range rs {
				if r.Status == vocab.StatusQueued || r.Status == vocab.StatusRunning {
					return false
				}
			}
			return len(rs) == total
		})
		waveStarts, waveSkips := 0, map[string]int{}
		for _, r := range rs {
			if !strings.HasPrefix(r.Fingerprint, waveFingerprint(wave, 0)[:8]) {
				continue
			}
			step := profileStep(t, d.run(t, r.ID))
			switch {
			case step.Status == vocab.StatusSucceeded:
				waveStarts++
			case step.Status == vocab.StatusSkipped && strings.HasPrefix(step.Reason, "budget: ") && strings.Contains(step.Reason, "profiling.max_per_hour"):
				waveSkips["max_per_hour"]++
			case step.Status == vocab.StatusSkipped && strings.HasPrefix(step.Reason, "budget: ") && strings.Contains(step.Reason, "profiling.max_concurrent"):
				waveSkips["max_concurrent"]++
			default:
				t.Errorf("wave %d run %s: profile step %s (%s %s), want succeeded or skipped for the budget", wave, r.ID, step.Status, step.Reason, step.Error)
			}
		}
		starts += waveStarts
		for k, v := range waveSkips {
			skips[k] += v
		}
		lastWave = waveSkips["max_per_hour"]
		t.Logf("wave %d: %d started, %d skipped for max_concurrent, %d for max_per_hour", wave, waveStarts,
			waveSkips["max_concurrent"], waveSkips["max_per_hour"])
		if waveStarts+waveSkips["max_concurrent"]+waveSkips["max_per_hour"] != n {
			t.Fatalf("wave %d: %d of %d runs accounted for", wave, waveStarts+waveSkips["max_concurrent"]+waveSkips["max_per_hour"], n)
		}
		if waveStarts > maxConc {
			t.Errorf("wave %d: %d captures started at once, max_concurrent is %d", wave, waveStarts, maxConc)
		}
		if starts < perHour && waveStarts == 0 {
			t.Fatalf("wave %d: no capture started with %d of the hour's %d used", wave, starts, perHour)
		}
	}
	close(stopSampling)
	<-sampling

	var all [][2]time.Time
	simStarts, perSim := 0, map[int]int{}
	for i, s := range sims {
		st := checkClean(t, s)
		simStarts += st.Starts
		perSim[st.Starts]++
		if st.Starts != st.Stops {
			t.Errorf("sim %d: %d starts, %d stops", i, st.Starts, st.Stops)
		}
		all = append(all, s.recordings()...)
	}
	overlap := maxOverlap(all)
	t.Logf("%d alerts on %d servers: %d captures (sims' starts %d; servers by starts %v), skipped: %d max_concurrent, %d max_per_hour; "+
		"most recording at once: %d by the servers' start/stop times, %d over %d samples of their state",
		total, n, starts, simStarts, perSim, skips["max_concurrent"], skips["max_per_hour"], overlap, sampled, samples)
	if starts != perHour || simStarts != perHour {
		t.Errorf("%d captures (%d starts seen by the sims), want exactly max_per_hour %d", starts, simStarts, perHour)
	}
	if skips["max_concurrent"]+skips["max_per_hour"] != total-perHour {
		t.Errorf("%d skipped for the budget, want the other %d", skips["max_concurrent"]+skips["max_per_hour"], total-perHour)
	}
	if overlap > maxConc || sampled > maxConc {
		t.Errorf("%d recording at once by start/stop times, %d sampled; max_concurrent is %d", overlap, sampled, maxConc)
	}
	if ps := d.profiling(t); ps.Budget.StartsLastHour != perHour || len(ps.Leases) != 0 {
		t.Errorf("GET /api/v1/profiling: %+v, want %d starts in the hour and no lease held", ps, perHour)
	}
}

// waveFingerprint is alert i's fingerprint in wave (16 hex digits, the
// wave's in the first 8).
func waveFingerprint(wave, i int) string { return fmt.Sprintf("b0d6e7%02x%08x", wave, i) }
