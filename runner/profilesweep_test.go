package runner

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/autocapture/autocapture/capture"
	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vllmsim"
)

func withTargets() svcOpt {
	return func(o *Options) { o.Env = &capture.Env{Targets: &http.Client{}} }
}

// crash makes s behave as a process killed with kill -9: it writes nothing more.
func crash(s *Service) { s.db.(*cutStore).cut.Store(true) }

// waitFor polls cond every 20 ms (a hang guard of 30 s, not a timing assertion).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func leaseState(t *testing.T, s *Service, target string) string {
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
// plus one sweep interval (and scheduling slack), the sim sees a clean
// protocol, and the target is free again.
func TestProfileSweeperStopsADeadOwnersRecording(t *testing.T) {
	forEachStore(t, func(t *testing.T, db dbRef) {
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

		prof := withProfiling(config.Profiling{SweepInterval: sweep, StopTimeout: 5 * time.Second})
		survivor := newService(t, db, planner(), true, prof, withTargets()) // started first: River's leader
		doomed := newService(t, db, planner(), false, prof, withTargets())
		// The step's own hold (15 s), renewed once after the start as a live
		// owner does: a recording's lease still ends at its deadline +
		// stopGrace, so the sweeper stops it then, not a hold after the
		// last renewal (it did: a 5 s frame was stopped ~10 s late).
		r := req(srv.URL, "run-dead", "profile")
		r.Hold = 15 * time.Second
		l := mustAcquire(t, doomed, r)
		rec, err := l.Recording(ctx, frame, nil)
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
		waitFor(t, "the target to be released", func() bool { return leaseState(t, survivor, srv.URL) == "" })
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
		mustAcquire(t, survivor, req(srv.URL, "run-next", "profile"))
		if n := testutil.ToFloat64(survivor.pm.sweepActions.WithLabelValues("stopped")); n != 1 {
			t.Errorf("sweep actions stopped = %v, want 1", n)
		}
	})
}

func runEvents(t *testing.T, s *Service, runID string) string {
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
// releases it.
func TestProfileSweeperHangingStop(t *testing.T) {
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
	prof := withProfiling(config.Profiling{SweepInterval: 100 * time.Millisecond, StopTimeout: 300 * time.Millisecond})
	db := dbRef{path: t.TempDir() + "/a.db"}
	s := newService(t, db, planner(), true, prof, withTargets(), func(o *Options) { o.Registerer = reg })
	doomed := newService(t, db, planner(), false, prof)
	r := req(srv.URL, "run-hung", "profile")
	r.Hold = 100 * time.Millisecond
	l := mustAcquire(t, doomed, r)
	if _, err := l.Recording(context.Background(), 100*time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	crash(doomed)

	waitFor(t, "stop_failed", func() bool { return leaseState(t, s, srv.URL) == capture.LeaseStopFailed })
	_, err := s.Profiles().Acquire(context.Background(), req(srv.URL, "run-other", "profile"))
	refusal(t, err, capture.RefusedBusy, "stop_profile not answered within profiling.stop_timeout 300ms")
	if n := testutil.ToFloat64(s.pm.stopFailures); n < 1 {
		t.Errorf("stop failures %v, want at least 1", n)
	}
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
	if ev := runEvents(t, s, "run-hung"); !strings.Contains(ev, "stop_failed") || !strings.HasSuffix(ev, "stopped") {
		t.Errorf("run-hung's events %s: want stop_failed, then stopped", ev)
	}
}

// TestProfileStopRequest: an operator's stop on one replica reaches the
// capture held by another (its poll sees the flag), with who asked; a run
// without a capture is ErrNoCapture, an unknown one ErrNotFound.
func TestProfileStopRequest(t *testing.T) {
	forEachStore(t, func(t *testing.T, db dbRef) {
		api := newService(t, db, planner(), false)
		holder := newService(t, db, planner(), false)
		ctx := context.Background()
		run := acceptOne(t, api, firing("fp-stop", time.Now())).RunID
		idle := acceptOne(t, api, firing("fp-idle", time.Now())).RunID
		l := mustAcquire(t, holder, req("http://10.0.0.9:8000", run, "profile"))
		if _, err := l.Recording(ctx, 30*time.Second, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := api.StopProfile(ctx, "no-such-run", "alice"); !errors.Is(err, runs.ErrNotFound) {
			t.Fatalf("stop of an unknown run: %v", err)
		}
		if _, err := api.StopProfile(ctx, idle, "alice"); !errors.Is(err, runs.ErrNoCapture) {
			t.Fatalf("stop of a run without a capture: %v", err)
		}
		got, err := api.StopProfile(ctx, run, "alice")
		if err != nil {
			t.Fatal(err)
		}
		if got.StopRequestedBy != "alice" || got.StopRequestedAt == nil || got.State != capture.LeaseRecording {
			t.Fatalf("stop request %+v", got)
		}
		if _, err := api.StopProfile(ctx, run, "bob"); err != nil { // twice: the first asker stays
			t.Fatal(err)
		}
		select {
		case <-l.StopRequested():
		case <-time.After(10 * time.Second):
			t.Fatal("the holder never saw the stop request")
		}
		if by := l.(*profileLease).StopRequestedBy(); by != "alice" {
			t.Errorf("stop requested by %q, want alice", by)
		}
		rp, err := api.RunProfile(ctx, run)
		if err != nil {
			t.Fatal(err)
		}
		if rp.Lease == nil || rp.Lease.StopRequestedBy != "alice" || len(rp.Events) != 4 ||
			rp.Events[2].Event != "stop_requested" || rp.Events[2].Actor != "alice" {
			t.Fatalf("run profile %+v", rp)
		}
		if _, err := api.ClearProfileLease(ctx, "http://10.0.0.9:8000", "carol"); !errors.Is(err, runs.ErrNotStuck) {
			t.Fatalf("clear of a live lease: %v, want ErrNotStuck", err)
		}
		if _, err := api.ClearProfileLease(ctx, "http://10.0.0.10:8000", "carol"); !errors.Is(err, runs.ErrNoLease) {
			t.Fatalf("clear of a free target: %v, want ErrNoLease", err)
		}
	})
}
