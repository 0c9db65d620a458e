package profiling

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"
	"go.uber.org/zap/zaptest"

	"github.com/autocapture/autocapture/capture/profile"
	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vllmsim"
	"github.com/autocapture/autocapture/vocab"
)

// sglangServer is an SGLang sim in real time behind a loopback server.
func sglangServer(t *testing.T) (*vllmsim.Sim, *httptest.Server) {
	t.Helper()
	sim, err := vllmsim.New(vllmsim.Options{Engine: vocab.EngineSGLang, ProfilerDir: t.TempDir(), ProfilerLayers: 4,
		ProfilerExportRate: 50e6, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sim.Handler())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sim.Run(ctx) }()
	t.Cleanup(func() { srv.Close(); cancel(); <-done })
	return sim, srv
}

// TestProfileSweeperStopsSGLangRecordings: a replica dies mid-frame on an
// SGLang server; the survivor's sweeper stops the recording in SGLang's
// dialect (read from what the step saved): a recording still running gets
// its stop and writes its files; one that its num_steps auto-stop already
// ended answers "not in progress", a bare 500, which is done (stopped), not
// a failed stop retried for ever.
func TestProfileSweeperStopsSGLangRecordings(t *testing.T) {
	t.Parallel()
	for name, body := range map[string]string{"running": `{}`, "auto-stopped": `{"num_steps": 3}`} {
		t.Run(name, func(t *testing.T) {
			sim, srv := sglangServer(t)
			db := testenv.DB{Path: t.TempDir() + "/a.db"}
			prof := withProfiling(config.Profiling{SweepInterval: 100 * time.Millisecond, StopTimeout: 10 * time.Second})
			survivor := newPlane(t, db, true, prof, withTargets())
			doomed := newPlane(t, db, false, prof)
			r := req(srv.URL, "run-dead", "profile")
			r.Hold = 200 * time.Millisecond
			l := mustAcquire(t, doomed, r)
			saved := json.RawMessage(`{"files":{},"engine":"sglang","prefix":"autocapture-run-dead-profile"}`)
			if _, err := l.Recording(context.Background(), 300*time.Millisecond, saved); err != nil {
				t.Fatal(err)
			}
			resp, err := http.Post(srv.URL+"/start_profile", "application/json", strings.NewReader(body))
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("start: %v %v", resp, err)
			}
			resp.Body.Close()
			crash(doomed)
			waitFor(t, "the sweeper to record the stop", func() bool { return leaseState(t, survivor, srv.URL) == vocab.LeaseStopped })
			st := sim.Profiler()
			if st.State != "idle" || st.Starts != 1 || st.FilesWritten != 1 {
				t.Errorf("sim %+v: want idle with the recording's file", st)
			}
			// One stop either way: the sweeper's, or the auto-stop's, after
			// which the sweeper's found nothing recording (SGLang's error).
			idle := map[string]int{"running": 0, "auto-stopped": 1}[name]
			if st.Stops != 1 || st.Violations[vllmsim.ViolationStopWhileIdle] != idle {
				t.Errorf("sim stops %d, stops while idle %d; want 1, %d", st.Stops, st.Violations[vllmsim.ViolationStopWhileIdle], idle)
			}
			if events := runEvents(t, survivor, "run-dead"); !strings.Contains(events, "sweeper_stopping,stopped") || strings.Contains(events, vocab.LeaseStopFailed) {
				t.Errorf("events %s: want the sweeper's stop answered, no stop_failed", events)
			}
		})
	}
}

// TestProfilePauseAppliesToSGLang: the plane knows no engine: paused, an
// SGLang capture is refused like a vLLM one, and the server never sees a
// start; resumed, the same step frames it under the plane's lease.
func TestProfilePauseAppliesToSGLang(t *testing.T) {
	t.Parallel()
	sim, srv := sglangServer(t)
	db := testenv.DB{Path: t.TempDir() + "/a.db"}
	pl := newPlane(t, db, false, withProfiling(config.Profiling{}), withTargets())
	ctx := context.Background()
	if _, err := pl.PauseProfiling(ctx, "oncall", "bad deploy"); err != nil {
		t.Fatal(err)
	}
	store, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(srv.URL)
	runID := insertRun(t, pl, "fp-sglang")
	in := &vocab.Input{RunID: runID, Plan: "sglang-high-itl", StepID: "profile", Attempt: 1, RunCreated: time.Now(),
		Alert: template.Alert{Labels: template.KV{"alertname": "SGLangHighITL", "instance": u.Host}},
		Env:   &vocab.Env{Store: store, Targets: &http.Client{}, Profiles: pl}, Log: zaptest.NewLogger(t)}
	step, err := profile.Kind.Build(&profile.Config{Engine: vocab.EngineSGLang, Duration: 300 * time.Millisecond, OutputDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	res, err := step.Run(ctx, in)
	if _, skipped := vocab.IsSkip(err); !skipped || res.Findings["refused"] != vocab.RefusedPaused {
		t.Fatalf("paused: %v, findings %v: want a paused skip", err, res.Findings)
	}
	if st := sim.Profiler(); st.Starts != 0 {
		t.Fatalf("the paused plane let a start through: %+v", st)
	}
	if _, err := pl.ResumeProfiling(ctx, "oncall"); err != nil {
		t.Fatal(err)
	}
	if res, err = step.Run(ctx, in); err != nil {
		t.Fatalf("resumed: %v (%v)", err, res.Summary)
	}
	if st := sim.Profiler(); st.Starts != 1 || st.Stops != 1 || st.State != "idle" {
		t.Errorf("sim %+v: want one framed capture", st)
	}
	if leaseState(t, pl, srv.URL) != "" {
		t.Errorf("the lease is still held after the capture")
	}
}

// TestProfileStallIsRememberedAcrossReplicas: one replica records a
// capture's stall on its start; another reads it as the target's last, and
// a later unmeasured capture does not hide it.
func TestProfileStallIsRememberedAcrossReplicas(t *testing.T) {
	t.Parallel()
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		ctx := context.Background()
		a := newPlane(t, db, false)
		b := newPlane(t, db, false)
		const target = "http://10.0.0.9:30000"
		if _, _, ok, err := b.LastStall(ctx, target); ok || err != nil {
			t.Fatalf("no capture yet: ok %v err %v", ok, err)
		}
		r := req(target+"/", "run-a", "profile") // a trailing slash is the same target
		l := mustAcquire(t, a, r)
		if _, err := l.Recording(ctx, time.Second, nil); err != nil {
			t.Fatal(err)
		}
		if err := l.Stopping(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := l.Stopped(ctx); err != nil {
			t.Fatal(err)
		}
		if err := a.RecordStall(ctx, r, 2300*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		stall, at, ok, err := b.LastStall(ctx, target)
		if err != nil || !ok || stall != 2300*time.Millisecond || at.IsZero() {
			t.Fatalf("the other replica reads %v at %v (%v %v), want 2.3s", stall, at, ok, err)
		}
		if err := a.RecordStall(ctx, req(target, "run-never", "profile"), time.Second); err == nil {
			t.Error("a stall recorded for a run that never started there")
		}
	})
}
