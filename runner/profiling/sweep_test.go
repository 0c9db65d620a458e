package profiling

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/vllmsim"
	"github.com/autocapture/autocapture/vocab"
)

func withTargets() planeOpt {
	return func(d *Deps) { d.Targets = &http.Client{} }
}

func leaseState(t *testing.T, s *Plane, target string) string {
	t.Helper()
	var st string
	err := s.db.QueryRowContext(context.Background(), `SELECT state FROM autocapture_profile_leases WHERE target = $1`, target).Scan(&st)
	if err != nil {
		return ""
	}
	return st
}

func profilerStatus(t *testing.T, base string) vllmsim.ProfilerStatus {
	t.Helper()
	resp, err := http.Get(base + "/admin/profiler")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st vllmsim.ProfilerStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestProfileSweeperStopsADeadOwnersRecording: a replica takes the lease,
// starts an armed vllmsim recording and dies (its store cut: no renewal, no
// stop). The other replica's sweeper stops the recording within its deadline
// plus one sweep interval (and scheduling slack) and the sim sees a clean
// protocol. The files are still on the server: the lease stays stopped, with
// no owner, for profiling.collect_window, so another run is refused as busy
// (saying why and until when) while the resumed attempt of the same run's
// step gets it back, stopped with its pre-start listing, collects and
// releases; then the target is free. (Before: released at once, and the
// resumed attempt took a fresh lease and started a second frame.)
func TestProfileSweeperStopsADeadOwnersRecording(t *testing.T) {
	t.Parallel()
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		const frame, sweep = time.Second, 200 * time.Millisecond
		const slack = 3 * time.Second // a loaded test machine
		// The sim's clock moves on its own ticks, which lag under load (-race,
		// shared cores): its limit allows that lag on top; the timing itself
		// is asserted below on the real clock.
		sim, err := vllmsim.New(vllmsim.Options{ProfilerDir: t.TempDir(), ProfilerFlushDelay: 100 * time.Millisecond,
			ProfilerMaxRecording: frame + stopGrace + sweep + slack + 2*time.Second, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(sim.Handler())
		defer srv.Close()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go sim.Run(ctx)

		// A generous stop timeout: under -race on shared cores the sim once
		// took > 5 s to answer, the sweeper's retry then counted a stop
		// while idle. The bound asserted is the stop's arrival, not this.
		prof := withProfiling(config.Profiling{SweepInterval: sweep, StopTimeout: 30 * time.Second})
		survivor := newPlane(t, db, true, prof, withTargets()) // its sweeper runs
		doomed := newPlane(t, db, false, prof, withTargets())
		// The step's own hold (15 s), renewed once after the start as a live
		// owner does: a recording's lease still ends at its deadline +
		// stopGrace, so the sweeper stops it then, not a hold after the
		// last renewal (it did: a 5 s frame was stopped ~10 s late).
		r := req(srv.URL, "run-dead", "profile")
		r.Hold = 15 * time.Second
		l := mustAcquire(t, doomed, r)
		listing := json.RawMessage(`{"files":{"old.json.gz":10}}`)
		rec, err := l.Recording(ctx, frame, listing)
		if err != nil {
			t.Fatal(err)
		}
		if resp, err := http.Post(srv.URL+"/start_profile", "", nil); err != nil || resp.StatusCode != 200 {
			t.Fatalf("start_profile: %v %v", resp, err)
		}
		if err := l.Renew(ctx, r.Hold); err != nil {
			t.Fatal(err)
		}
		crash(doomed)

		waitFor(t, "the sim to get its stop", func() bool { return profilerStatus(t, srv.URL).Stops == 1 })
		stoppedBy := time.Now()
		t.Logf("the sim got its stop %v after the deadline (sweep interval %v)", stoppedBy.Sub(rec.Deadline), sweep)
		if late := stoppedBy.Sub(rec.Deadline); late > stopGrace+sweep+slack {
			t.Errorf("stopped %v after the deadline, want within stopGrace (%v), one sweep interval (%v) and slack", late, stopGrace, sweep)
		}
		waitFor(t, "the sweeper to record the answered stop", func() bool {
			return leaseState(t, survivor, srv.URL) == vocab.LeaseStopped
		})
		st := profilerStatus(t, srv.URL)
		if st.State != "idle" || st.Starts != 1 || st.Stops != 1 {
			t.Errorf("sim profiler %+v: want idle after one start and one stop", st)
		}
		for kind, n := range st.Violations {
			if n != 0 {
				t.Errorf("sim counted %d %s", n, kind)
			}
		}
		events := runEvents(t, survivor, "run-dead")
		if !strings.Contains(events, "sweeper_stopping,stopped") {
			t.Errorf("run-dead's events %s: want the sweeper's stop", events)
		}
		_, err = survivor.Acquire(ctx, req(srv.URL, "run-next", "profile"))
		refusal(t, err, vocab.RefusedBusy, "run run-dead's capture on "+srv.URL+" was stopped by the sweeper")
		refusal(t, err, vocab.RefusedBusy, "(profiling.collect_window)")
		// The swept lease holds only its own target: another server may be
		// profiled under max_concurrent 1.
		other := mustAcquire(t, survivor, req("http://10.0.0.77:8000", "run-next", "profile"))
		if err := other.Release(ctx); err != nil {
			t.Fatal(err)
		}
		resumed := mustAcquire(t, survivor, r)
		got := resumed.Resumed()
		if got == nil || got.State != vocab.LeaseStopped || string(got.Saved) != string(listing) || !got.Since.Equal(rec.Since) {
			t.Fatalf("the resumed attempt got %+v, want the swept recording, stopped, with its listing %s", got, listing)
		}
		if err := resumed.Release(ctx); err != nil {
			t.Fatal(err)
		}
		mustAcquire(t, survivor, req(srv.URL, "run-next", "profile"))
		if n := testutil.ToFloat64(survivor.pm.sweepActions.WithLabelValues("stopped")); n != 1 {
			t.Errorf("sweep actions stopped = %v, want 1", n)
		}
	})
}

func runEvents(t *testing.T, s *Plane, runID string) string {
	t.Helper()
	rows, err := s.db.QueryContext(context.Background(), `SELECT event FROM autocapture_profile_events WHERE run_id = $1 ORDER BY seq`, runID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var e string
		rows.Scan(&e)
		out = append(out, e)
	}
	return strings.Join(out, ",")
}

// TestProfileSweeperHangingStop: a server whose stop_profile never answers.
// The sweeper's stop is cut at stop_timeout, the lease becomes stop_failed,
// the target cannot be profiled; once the server answers, a retried stop
// leaves it stopped for the collect window (300 ms here), then it is released.
func TestProfileSweeperHangingStop(t *testing.T) {
	t.Parallel()
	var hang atomic.Bool
	var stops atomic.Int32
	hang.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/stop_profile" {
			http.NotFound(w, r)
			return
		}
		stops.Add(1)
		if hang.Load() {
			<-r.Context().Done() // never answers; the client gives up
			return
		}
	}))
	defer srv.Close()
	reg := prometheus.NewRegistry()
	prof := withProfiling(config.Profiling{SweepInterval: 100 * time.Millisecond, StopTimeout: 300 * time.Millisecond,
		CollectWindow: 300 * time.Millisecond})
	db := testenv.DB{Path: t.TempDir() + "/a.db"}
	s := newPlane(t, db, true, prof, withTargets(), func(d *Deps) { d.Registerer = reg })
	doomed := newPlane(t, db, false, prof)
	r := req(srv.URL, "run-hung", "profile")
	r.Hold = 100 * time.Millisecond
	l := mustAcquire(t, doomed, r)
	if _, err := l.Recording(context.Background(), 100*time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	crash(doomed)

	waitFor(t, "stop_failed", func() bool { return leaseState(t, s, srv.URL) == vocab.LeaseStopFailed })
	_, err := s.Acquire(context.Background(), req(srv.URL, "run-other", "profile"))
	refusal(t, err, vocab.RefusedBusy, "stop_profile not answered within profiling.stop_timeout 300ms")
	// The sweeper counts the failure after it records stop_failed: under
	// load the test read the counter between the two (a loaded full suite).
	waitFor(t, "the stop's failure to be counted", func() bool { return testutil.ToFloat64(s.pm.stopFailures) >= 1 })
	if n, err := testutil.GatherAndCount(reg, "autocapture_profile_leases"); err != nil || n != 5 {
		t.Errorf("lease gauge series %d (%v), want one per state", n, err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP autocapture_profile_recordings_past_deadline Captures still recording or stopping after their deadline (the sweeper stops them once their owner is gone).
# TYPE autocapture_profile_recordings_past_deadline gauge
autocapture_profile_recordings_past_deadline 0
`), "autocapture_profile_recordings_past_deadline"); err != nil {
		t.Error(err)
	}

	hang.Store(false)
	waitFor(t, "a later stop to release the target", func() bool { return leaseState(t, s, srv.URL) == "" })
	if n := stops.Load(); n < 2 {
		t.Errorf("%d stops sent, want the hung one and a retry", n)
	}
	mustAcquire(t, s, req(srv.URL, "run-other", "profile"))
	if ev := runEvents(t, s, "run-hung"); !strings.Contains(ev, "stop_failed") || !strings.HasSuffix(ev, "stopped,released") {
		t.Errorf("run-hung's events %s: want stop_failed, then stopped, then released when the collect window passed", ev)
	}
}

// sweptLease makes target's lease what the sweeper leaves after an answered
// stop of a dead owner's recording: a start counted, the row stopped with no
// owner for the collect window (sweepStopped itself, on a claimed row).
func sweptLease(t *testing.T, s *Plane, owner *Plane, r vocab.LeaseRequest) {
	t.Helper()
	ctx := context.Background()
	l := mustAcquire(t, owner, r)
	if _, err := l.Recording(ctx, time.Minute, json.RawMessage(`{"files":{}}`)); err != nil {
		t.Fatal(err)
	}
	row, err := leaseOf(s.tables.ProfileLeases.Get(ctx, s.db, r.Target))
	if err != nil {
		t.Fatal(err)
	}
	const claim = "claim-token"
	if _, err := s.db.ExecContext(ctx, `UPDATE autocapture_profile_leases SET owner = $1, token = $2 WHERE target = $3`,
		sweeperOwner+s.id, claim, r.Target); err != nil {
		t.Fatal(err)
	}
	s.sweepStopped(ctx, row, claim)
	if st := leaseState(t, s, r.Target); st != vocab.LeaseStopped {
		t.Fatalf("after the sweeper's answered stop the lease is %q, want stopped", st)
	}
}

// TestProfileSweptLeaseLapses: a swept lease nobody collects is released by
// the sweep once profiling.collect_window passes, and a resumed attempt of
// the same run's step that comes later is refused "recorded" (its start was
// counted: no second frame), saying the sweeper stopped the first and its
// files were left on the server. Before, it took a fresh lease and started
// again.
func TestProfileSweptLeaseLapses(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		const window = 400 * time.Millisecond
		prof := withProfiling(config.Profiling{SweepInterval: 100 * time.Millisecond, StopTimeout: time.Second, CollectWindow: window})
		s := newPlane(t, db, false, prof)
		doomed := newPlane(t, db, false, prof)
		const tgt = "http://10.0.0.31:8000"
		r := req(tgt, "run-swept", "profile")
		sweptLease(t, s, doomed, r)
		if err := s.sweepProfiles(context.Background()); err != nil { // inside the window: kept
			t.Fatal(err)
		}
		if st := leaseState(t, s, tgt); st != vocab.LeaseStopped {
			t.Fatalf("inside the collect window the lease is %q, want stopped", st)
		}
		time.Sleep(window + 50*time.Millisecond)
		if err := s.sweepProfiles(context.Background()); err != nil {
			t.Fatal(err)
		}
		if st := leaseState(t, s, tgt); st != "" {
			t.Fatalf("past the collect window the lease is %q, want released", st)
		}
		if ev := runEvents(t, s, "run-swept"); !strings.HasSuffix(ev, "stopped,released") {
			t.Errorf("events %s: want the sweeper's stopped, then released", ev)
		}
		_, err := s.Acquire(context.Background(), r)
		refusal(t, err, vocab.RefusedRecorded, "the sweeper stopped that frame after its owner died, and its files were left on the server")
		refusal(t, err, vocab.RefusedRecorded, "no second start")
		// Another step of the run, and another run, may still profile it.
		mustAcquire(t, s, req(tgt, "run-other", "profile"))
	})
}

// TestProfileSweptLeaseOfAnEndedRun: a swept lease whose run has ended (it
// will never resume: runs.max_attempts spent, cancelled) is released at the
// next sweep, not a collect window later.
func TestProfileSweptLeaseOfAnEndedRun(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		prof := withProfiling(config.Profiling{SweepInterval: 100 * time.Millisecond, StopTimeout: time.Second, CollectWindow: time.Hour})
		s := newPlane(t, db, false, prof)
		doomed := newPlane(t, db, false, prof)
		ctx := context.Background()
		live := insertRun(t, s, "fp-swept-live")
		ended := insertRun(t, s, "fp-swept-ended")
		sweptLease(t, s, doomed, req("http://10.0.0.41:8000", live, "profile"))
		sweptLease(t, s, doomed, req("http://10.0.0.42:8000", ended, "profile"))
		if _, err := s.db.ExecContext(ctx, `UPDATE autocapture_runs SET status = $1, finished_at = 1 WHERE id = $2`,
			"failed", ended); err != nil {
			t.Fatal(err)
		}
		if err := s.sweepProfiles(ctx); err != nil {
			t.Fatal(err)
		}
		if st := leaseState(t, s, "http://10.0.0.42:8000"); st != "" {
			t.Errorf("the ended run's swept lease is %q, want released", st)
		}
		if st := leaseState(t, s, "http://10.0.0.41:8000"); st != vocab.LeaseStopped {
			t.Errorf("the live run's swept lease is %q, want kept stopped for its resumed attempt", st)
		}
		rp, err := s.RunProfile(ctx, ended)
		if err != nil {
			t.Fatal(err)
		}
		if last := rp.Events[len(rp.Events)-1]; last.Event != "released" || !strings.Contains(last.Detail, "the run ended") {
			t.Errorf("last event %+v, want released because the run ended", last)
		}
		// An operator may clear a swept lease (nothing records on it).
		if _, err := s.ClearProfileLease(ctx, "http://10.0.0.41:8000", "carol"); err != nil {
			t.Fatalf("clear a swept lease: %v", err)
		}
	})
}

// TestProfileStepResults: autocapture_profile_steps_total counts a persisted
// profile step by what its record says, the most telling result first (a
// stop that failed on a frame cut short is stop_failed, not cut); a step
// that never ran is not counted, nor is another kind.
func TestProfileStepResults(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := newPlane(t, testenv.DB{Path: t.TempDir() + "/a.db"}, false, func(d *Deps) { d.Registerer = reg })
	rec := func(status vocab.Status, f map[string]any) executor.StepRecord {
		return executor.StepRecord{Kind: "profile", Status: status, Findings: f}
	}
	for _, tc := range []struct {
		rec  executor.StepRecord
		want string
	}{
		{rec(vocab.StatusSucceeded, map[string]any{"armed": true, "files": []string{"a.json.gz"}}), "captured"},
		{rec(vocab.StatusSucceeded, map[string]any{"armed": true, "resumed": "stopped", "cut_short": "resumed after an interruption"}), "resumed"},
		{rec(vocab.StatusCancelled, map[string]any{"armed": true, "cut_short": "alert resolved"}), "cut"},
		{rec(vocab.StatusSucceeded, map[string]any{"armed": true, "cut_short": "an operator asked to stop (alice)"}), "cut"},
		{rec(vocab.StatusFailed, map[string]any{"armed": false, "how_to_arm": "…"}), "not_armed"},
		{rec(vocab.StatusFailed, map[string]any{"armed": true, "cut_short": "x", "stop_error": "stop_timeout"}), "stop_failed"},
		{rec(vocab.StatusFailed, map[string]any{"armed": true, "stop_error": "lost", "lease_lost": true}), "lease_lost"},
		{rec(vocab.StatusSkipped, map[string]any{"refused": vocab.RefusedBusy}), "refused_busy"},
		{rec(vocab.StatusSkipped, map[string]any{"refused": vocab.RefusedRecorded}), "refused_recorded"},
		{rec(vocab.StatusSkipped, map[string]any{"refused": "new-kind"}), "refused_other"},
		{rec(vocab.StatusSkipped, map[string]any{"opted_out": "label autocapture_profile=off"}), "opted_out"},
		{rec(vocab.StatusFailed, nil), "failed"},
		{rec(vocab.StatusSkipped, nil), ""},       // `when` false: never ran
		{rec(vocab.StatusNotConfigured, nil), ""}, // no agent token: never framed, no failure
	} {
		if got := profileStepResult(tc.rec); got != tc.want {
			t.Errorf("%s %v: result %q, want %q", tc.rec.Status, tc.rec.Findings, got, tc.want)
		}
		s.pm.countProfileStep(tc.rec)
	}
	s.pm.countProfileStep(executor.StepRecord{Kind: "http", Status: vocab.StatusSucceeded, Findings: map[string]any{}})
	if n, err := testutil.GatherAndCount(reg, "autocapture_profile_steps_total"); err != nil || n != 14 {
		t.Errorf("%d series (%v), want every result from zero: 8 outcomes and 6 refusal kinds", n, err)
	}
	for result, want := range map[string]float64{"captured": 1, "cut": 2, "refused_busy": 1, "refused_other": 1, "failed": 1, "refused_paused": 0} {
		if got := testutil.ToFloat64(s.pm.stepResults.WithLabelValues(result)); got != want {
			t.Errorf("autocapture_profile_steps_total{result=%q} = %v, want %v", result, got, want)
		}
	}
}

// TestProfileSweeperReleasesAnUnarmedServer: a dead owner's recording on a
// server whose stop_profile answers 404 (it restarted without its profiler)
// is released with one stop, not held as stop_failed and retried for ever
// (a target, and a slot of max_concurrent, held until an operator came).
func TestProfileSweeperReleasesAnUnarmedServer(t *testing.T) {
	t.Parallel()
	var stops atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stop_profile" {
			stops.Add(1)
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()
	prof := withProfiling(config.Profiling{SweepInterval: 100 * time.Millisecond, StopTimeout: 2 * time.Second})
	db := testenv.DB{Path: t.TempDir() + "/a.db"}
	s := newPlane(t, db, true, prof, withTargets())
	doomed := newPlane(t, db, false, prof)
	r := req(srv.URL, "run-restarted", "profile")
	r.Hold = 100 * time.Millisecond
	l := mustAcquire(t, doomed, r)
	if _, err := l.Recording(context.Background(), 100*time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	crash(doomed)
	waitFor(t, "the lease to be released", func() bool { return leaseState(t, s, srv.URL) == "" })
	time.Sleep(500 * time.Millisecond) // five more sweeps: nothing left to stop
	if n := stops.Load(); n != 1 {
		t.Errorf("stop_profile sent %d times, want once", n)
	}
	if events := runEvents(t, s, "run-restarted"); !strings.Contains(events, "sweeper_stopping,released") {
		t.Errorf("events %s: want the sweeper's stop, then released", events)
	}
	if n := testutil.ToFloat64(s.pm.stopFailures); n != 0 {
		t.Errorf("stop failures %v, want 0: a 404 is not a failed stop", n)
	}
	mustAcquire(t, s, req(srv.URL, "run-next", "profile"))
}
