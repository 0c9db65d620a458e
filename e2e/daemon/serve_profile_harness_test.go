package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
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

// The harness of the tier-3 fault tests (serve_profile_test.go): a real
// vllmsim in this process on a loopback listener, its profiler routes counted
// on the way in, and the real daemon binary with a playbook of the tests' own
// (a tier-1 http step that needs no Prometheus, then a profile step that
// collects from the sim's profiler folder).

// pfAlertname is the alertname the harness playbook matches.
const pfAlertname = "ProfileFault"

// pfOperator is the basic-auth user the harness calls the API as, so that
// kill switches name someone (a bearer token names nobody).
const (
	pfOperator = "oncall-alice"
	pfPassword = "alice-pw"
)

// pfSim is a vllmsim served on 127.0.0.1 behind a counter of its profiler
// routes.
type pfSim struct {
	sim  *vllmsim.Sim
	URL  string // http://127.0.0.1:port
	Inst string // 127.0.0.1:port: the alert's instance label, so the profile's default target
	Dir  string // the profiler folder; "" when unarmed

	// serialStops, when set, makes stop_profile calls wait for one under way
	// (see pfSimOpts.SerialStops).
	serialStops chan struct{}

	mu   sync.Mutex
	hits map[string][]time.Time // POST path → arrival times
}

// pfSimOpts shape a pfSim.
type pfSimOpts struct {
	Unarmed bool
	Faults  vllmsim.ProfilerFaults
	// SerialStops lets one stop_profile reach the sim at a time, as vLLM's
	// engine core serves one profile RPC at a time: a stop sent while another
	// hangs waits for it (and is dropped if its caller gave up meanwhile).
	// The sim alone answers a stop during a flush at once.
	SerialStops bool
	// SGLang makes the sim an SGLang server (no arming) whose stop exports
	// at ExportRate bytes/s, freezing serving meanwhile.
	SGLang     bool
	ExportRate float64
}

// startPFSim starts a sim (healthy traffic, 2 decoder layers per
// iteration: small files, the same mix) until the test ends.
func startPFSim(t *testing.T, o pfSimOpts) *pfSim {
	t.Helper()
	ps := &pfSim{hits: map[string][]time.Time{}}
	opts := vllmsim.Options{Seed: 1, ProfilerFlushDelay: 200 * time.Millisecond, ProfilerLayers: 2,
		ProfilerMaxRecording: 90 * time.Second, ProfilerFaults: o.Faults}
	if !o.Unarmed {
		ps.Dir = t.TempDir()
		opts.ProfilerDir = ps.Dir
	}
	if o.SGLang {
		opts.Engine, opts.ProfilerExportRate = "sglang", o.ExportRate
	}
	if o.SerialStops {
		ps.serialStops = make(chan struct{}, 1)
	}
	sim, err := vllmsim.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ps.sim = sim
	ctx, cancel := context.WithCancel(context.Background())
	go sim.Run(ctx)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// http.Server.Close, not httptest's: a hung stop_profile must not hold the
	// test's end for the hang.
	srv := &http.Server{Handler: ps.counted(sim.Handler())}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close(); cancel() })
	ps.Inst = ln.Addr().String()
	ps.URL = "http://" + ps.Inst
	return ps
}

func (ps *pfSim) counted(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && (r.URL.Path == "/start_profile" || r.URL.Path == "/stop_profile") {
			ps.mu.Lock()
			ps.hits[r.URL.Path] = append(ps.hits[r.URL.Path], time.Now())
			ps.mu.Unlock()
			if r.URL.Path == "/stop_profile" && ps.serialStops != nil {
				select {
				case ps.serialStops <- struct{}{}:
					defer func() { <-ps.serialStops }()
				case <-r.Context().Done():
					return // the caller gave up while another stop hung
				}
				if r.Context().Err() != nil {
					return
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// count is how many POSTs of path arrived.
func (ps *pfSim) count(path string) int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return len(ps.hits[path])
}

// arrivals are the times the POSTs of path arrived.
func (ps *pfSim) arrivals(path string) []time.Time {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return append([]time.Time(nil), ps.hits[path]...)
}

// profiler is GET /admin/profiler.
func (ps *pfSim) profiler(t *testing.T) vllmsim.ProfilerStatus {
	t.Helper()
	req, _ := http.NewRequest("GET", ps.URL+"/admin/profiler", nil)
	code, b := doRaw(t, req)
	var st vllmsim.ProfilerStatus
	if code != 200 || json.Unmarshal(b, &st) != nil {
		t.Fatalf("GET /admin/profiler: %d %s", code, b)
	}
	return st
}

// waitRecording waits until the sim records.
func (ps *pfSim) waitRecording(t *testing.T) {
	t.Helper()
	waitFor(t, 60*time.Second, "the sim to record", func() bool { return ps.profiler(t).State == "recording" })
}

// violations fails the test for any protocol violation the sim counted,
// except the kinds allowed (with their count).
func (ps *pfSim) violations(t *testing.T, allow map[string]int) {
	t.Helper()
	st := ps.profiler(t)
	for kind, n := range st.Violations {
		if n != allow[kind] {
			t.Errorf("sim counted %d %s violation(s), want %d", n, kind, allow[kind])
		}
	}
	if st.State != "idle" && st.State != "unarmed" {
		t.Errorf("sim profiler is %s at the end, want idle", st.State)
	}
}

// pfStep shapes the harness playbook's profile step.
type pfStep struct {
	Dir             string // collect.dir; "" collects nothing
	Duration        time.Duration
	StopTimeout     time.Duration
	Cooldown        time.Duration
	ContinueOnError bool
	Engine          string        // engine: "" (vLLM's default) or sglang
	MaxLastStall    time.Duration // cost.max_last_stall; 0: none
}

// pfPlaybook is the harness playbook: a tier-1 GET of the instance's
// /version, then the profile step of s (target: the instance label).
func pfPlaybook(s pfStep) string {
	var b strings.Builder
	fmt.Fprintf(&b, `playbooks:
  - name: profile-fault
    match:
      - alertname="%s"
    steps:
      - id: version
        http: {path: /version}
      - id: profile
        tier: 3
        timeout: 2m
        continue_on_error: %t
        profile:
          duration: %s
          stop_timeout: %s
`, pfAlertname, s.ContinueOnError, s.Duration, s.StopTimeout)
	if s.Cooldown > 0 {
		fmt.Fprintf(&b, "          cooldown: %s\n", s.Cooldown)
	}
	if s.Engine != "" {
		fmt.Fprintf(&b, "          engine: %s\n", s.Engine)
	}
	if s.MaxLastStall > 0 {
		fmt.Fprintf(&b, "          cost: {max_last_stall: %s}\n", s.MaxLastStall)
	}
	if s.Dir != "" {
		fmt.Fprintf(&b, "          collect: {dir: %q}\n", s.Dir)
	}
	return b.String()
}

// startPFDaemon starts the daemon with playbook pb, the API behind a
// bearer token and the operator's basic auth, and profiling: a budget that
// does not bind these tests (max_concurrent 8, max_per_hour 100), frames up
// to 1m, the sweeper every sweep, its stops bounded by sweepStop.
func startPFDaemon(t *testing.T, pb string, sweep, sweepStop time.Duration) *daemon {
	t.Helper()
	o := &daemonOpts{Token: "profile-fault", Playbooks: pb}
	cfg := writeDaemonConfig(t, o)
	raw, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(raw), "  auth:\n",
		fmt.Sprintf("  auth:\n    basic_auth: {username: %s, password: %s}\n", pfOperator, pfPassword), 1)
	text += fmt.Sprintf("profiling:\n  max_concurrent: 8\n  max_per_hour: 100\n  max_duration: 1m\n  sweep_interval: %s\n  stop_timeout: %s\n",
		sweep, sweepStop)
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := testenv.BuildBinary(t, "./cmd/autocapture")
	d := &daemon{URL: fmt.Sprintf("http://127.0.0.1:%d", o.Port), Port: o.Port, Token: o.Token}
	d.Proc = testenv.StartProcess(t, "autocapture-profile", exec.Command(bin, "serve", "--config.file", filepath.Clean(cfg)))
	d.Proc.WaitHTTP(t, d.URL+"/-/ready", 30*time.Second)
	return d
}

// pfAlert is a version-4 webhook body with one alert on instance.
func pfAlert(fingerprint, status, instance string, startsAt time.Time) []byte {
	return []byte(fmt.Sprintf(`{"version":"4","groupKey":"{}:{}","status":%q,"receiver":"autocapture","alerts":[`+
		`{"status":%q,"labels":{"alertname":%q,"instance":%q,"severity":"page"},"annotations":{},"startsAt":%q,`+
		`"endsAt":"0001-01-01T00:00:00Z","fingerprint":%q}]}`,
		status, status, pfAlertname, instance, startsAt.UTC().Format(time.RFC3339Nano), fingerprint))
}

// fire posts a firing alert and returns its run id.
func pfFire(t *testing.T, d *daemon, fingerprint, instance string, startsAt time.Time) string {
	t.Helper()
	code, b := d.post(t, pfAlert(fingerprint, "firing", instance, startsAt))
	id := runID(b)
	if code != 200 || id == "" {
		t.Fatalf("webhook: %d %s", code, b)
	}
	return id
}

// api calls the daemon's API as the operator (basic auth) and returns the
// status code and body.
func pfAPI(t *testing.T, d *daemon, method, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, d.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(pfOperator, pfPassword)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	return doRaw(t, req)
}

// pfStatus is GET /api/v1/profiling.
func pfStatus(t *testing.T, d *daemon) runs.ProfilingStatus {
	t.Helper()
	code, b := pfAPI(t, d, "GET", "/api/v1/profiling", "")
	var st runs.ProfilingStatus
	if code != 200 || json.Unmarshal(b, &st) != nil {
		t.Fatalf("GET /api/v1/profiling: %d %s", code, b)
	}
	return st
}

// pfRunProfile is GET /api/v1/runs/{id}/profile.
func pfRunProfile(t *testing.T, d *daemon, id string) runs.RunProfile {
	t.Helper()
	code, b := pfAPI(t, d, "GET", "/api/v1/runs/"+id+"/profile", "")
	var rp runs.RunProfile
	if code != 200 || json.Unmarshal(b, &rp) != nil {
		t.Fatalf("GET run profile: %d %s", code, b)
	}
	return rp
}

// pfEvents is a run's capture events as "event(actor)" in order.
func pfEvents(rp runs.RunProfile) string {
	var out []string
	for _, e := range rp.Events {
		out = append(out, e.Event+"("+e.Actor+")")
	}
	return strings.Join(out, ",")
}

// pfFinished says whether a run status is final.
func pfFinished(status vocab.Status) bool {
	return status != vocab.StatusQueued && status != vocab.StatusRunning && status != ""
}

// pfWaitRun waits for run id to finish and returns it.
func pfWaitRun(t *testing.T, d *daemon, id string) runs.Run {
	t.Helper()
	var r runs.Run
	waitFor(t, 3*time.Minute, "run "+id+" to finish", func() bool {
		r = d.run(t, id)
		return pfFinished(r.Status)
	})
	return r
}

// pfStepOf is run r's record of step id (nil when absent).
func pfStepOf(r runs.Run, id string) *executor.StepRecord {
	for i := range r.Steps {
		if r.Steps[i].ID == id {
			return &r.Steps[i]
		}
	}
	return nil
}

// pfMustStep is pfStepOf, failing the test when the run has no such record.
func pfMustStep(t *testing.T, r runs.Run, id string) *executor.StepRecord {
	t.Helper()
	s := pfStepOf(r, id)
	if s == nil {
		t.Fatalf("run %s has no %s step: %+v", r.ID, id, r.Steps)
	}
	return s
}

// pfArtifacts are the base names of a step's artifacts.
func pfArtifacts(s *executor.StepRecord) map[string]bool {
	out := map[string]bool{}
	for _, a := range s.Artifacts {
		out[a.Name] = true
	}
	return out
}

// pfText is what a step record says, for matching: reason (a skip's why), summary and error.
func pfText(s *executor.StepRecord) string { return s.Reason + " | " + s.Summary + " | " + s.Error }

// mustRequest is an HTTP request with a JSON body.
func mustRequest(t *testing.T, method, url, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return req
}
