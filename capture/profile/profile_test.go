package profile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"
	"go.uber.org/zap/zaptest"

	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/torchtrace"
	"github.com/autocapture/autocapture/vllmsim"
	"github.com/autocapture/autocapture/vocab"
)

// fastTuning keeps the step's clocks short for tests.
var fastTuning = profileTuning{renewEvery: 50 * time.Millisecond, hold: 2 * time.Second, poll: 50 * time.Millisecond,
	settle: 3 * time.Second, collect: 30 * time.Second, health: 2 * time.Second, leaseWrite: 2 * time.Second}

// logged wraps a target's handler and records, in log, every profiler call
// and completion with its status ("http:start_profile 200").
func logged(log *eventLog, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		name := strings.TrimPrefix(r.URL.Path, "/")
		switch name {
		case "start_profile", "stop_profile", "v1/completions":
			log.add("http:" + name)
		}
		h.ServeHTTP(rec, r)
		switch name {
		case "start_profile", "stop_profile", "v1/completions":
			log.add(fmt.Sprintf("http:%s %d", name, rec.status))
		}
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) { s.status = code; s.ResponseWriter.WriteHeader(code) }

// simTarget is a vllmsim running in real time behind a logging server.
type simTarget struct {
	sim  *vllmsim.Sim
	srv  *httptest.Server
	dir  string
	host string
}

func startSim(t *testing.T, log *eventLog, opts vllmsim.Options) *simTarget {
	t.Helper()
	if opts.Seed == 0 {
		opts.Seed = 1
	}
	sim, err := vllmsim.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sim.Run(ctx) }()
	srv := httptest.NewServer(logged(log, sim.Handler()))
	t.Cleanup(func() { srv.Close(); cancel(); <-done })
	u, _ := url.Parse(srv.URL)
	return &simTarget{sim: sim, srv: srv, dir: opts.ProfilerDir, host: u.Host}
}

// profileFixture is one step run's world.
type profileFixture struct {
	log   *eventLog
	guard *fakeGuard
	store vocab.Store
	env   *vocab.Env
}

func newProfileFixture(t *testing.T) *profileFixture {
	t.Helper()
	log := &eventLog{}
	store, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	g := newFakeGuard(log)
	return &profileFixture{log: log, guard: g, store: store, env: &vocab.Env{Store: store, Targets: &http.Client{}, Profiles: g}}
}

func (f *profileFixture) input(t *testing.T, host string, labels map[string]string) *vocab.Input {
	kv := template.KV{"alertname": "VLLMHighITL", "instance": host, "model_name": "m", "severity": "page"}
	for k, v := range labels {
		kv[k] = v
	}
	return &vocab.Input{RunID: "run-1", Plan: "vllm-high-itl", StepID: "profile", Attempt: 1, RunCreated: time.Now(),
		Alert: template.Alert{Labels: kv}, Env: f.env, Log: zaptest.NewLogger(t)}
}

func buildTestProfile(t *testing.T, cfg Config) *Profile {
	t.Helper()
	st, err := buildProfile(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := st.(*Profile)
	p.tune = fastTuning
	return p
}

// checkSimClean wants the sim's profiler idle with no protocol violation.
func checkSimClean(t *testing.T, sim *vllmsim.Sim, starts, stops int) {
	t.Helper()
	st := sim.Profiler()
	for k, n := range st.Violations {
		if n != 0 {
			t.Errorf("profiler violation %s: %d", k, n)
		}
	}
	if st.State != "idle" || st.Starts != starts || st.Stops != stops {
		t.Errorf("profiler %s, starts %d, stops %d; want idle, %d, %d", st.State, st.Starts, st.Stops, starts, stops)
	}
}

// checkStored wants every profiler file of dir stored under its own name,
// byte for byte (gzip passed through, not recompressed).
func checkStored(t *testing.T, store vocab.Store, res *vocab.Result, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]vocab.Artifact{}
	for _, a := range res.Artifacts {
		byName[a.Name] = a
	}
	if _, ok := byName[profileReportName]; !ok {
		t.Errorf("no %s among %v", profileReportName, names(res.Artifacts))
	}
	if len(entries) == 0 || len(byName) != len(entries)+1 {
		t.Errorf("stored %v, the folder has %d files", names(res.Artifacts), len(entries))
	}
	for _, e := range entries {
		a, ok := byName[e.Name()]
		if !ok {
			t.Errorf("%s not stored under its name (stored %v)", e.Name(), names(res.Artifacts))
			continue
		}
		if !strings.HasSuffix(a.Key, "/"+e.Name()) {
			t.Errorf("%s stored as %s: the name is not kept", e.Name(), a.Key)
		}
		want, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		obj, err := store.Stat(context.Background(), a.Key)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(e.Name(), ".gz") && (obj.ContentEncoding != "" || a.ContentType != "application/gzip") {
			t.Errorf("%s: content type %q, encoding %q: gzip must pass through as application/gzip", e.Name(), a.ContentType, obj.ContentEncoding)
		}
		rc, err := store.Open(context.Background(), a.Key)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		if !bytes.Equal(got, want) {
			t.Errorf("%s: stored %d bytes differ from the file's %d", e.Name(), len(got), len(want))
		}
	}
}

func names(as []vocab.Artifact) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.Name)
	}
	return out
}

func TestProfileHappyPath(t *testing.T) {
	f := newProfileFixture(t)
	dir := t.TempDir()
	tgt := startSim(t, f.log, vllmsim.Options{ProfilerDir: dir, ProfilerFlushDelay: 100 * time.Millisecond, TensorParallel: 2})
	p := buildTestProfile(t, Config{Duration: 400 * time.Millisecond, Collect: Collect{Dir: dir}})
	res, err := p.Run(context.Background(), f.input(t, tgt.host, nil))
	if err != nil {
		t.Fatalf("run: %v (%+v)", err, res)
	}
	checkSimClean(t, tgt.sim, 1, 1)
	checkStored(t, f.store, res, dir)
	if n := f.log.count("http:stop_profile"); n != 1 {
		t.Errorf("stop sent %d times, want once", n)
	}
	order := []string{"lease:acquire", "lease:recording", "http:start_profile", "lease:stopping", "http:stop_profile",
		"lease:stopped", "lease:release"}
	for i := 1; i < len(order); i++ {
		if a, b := f.log.index(order[i-1]), f.log.index(order[i]); a < 0 || b < 0 || a > b {
			t.Errorf("%s (at %d) must come before %s (at %d): %v", order[i-1], a, order[i], b, f.log.all())
		}
	}
	if v := f.guard.contractViolations(); len(v) > 0 {
		t.Errorf("lease contract violated: %v", v)
	}
	if l := f.guard.held("http://" + tgt.host); l != nil {
		t.Errorf("the lease is still held: %+v", l.req)
	}
	since, _ := res.Findings["since"].(time.Time)
	until, _ := res.Findings["until"].(time.Time)
	if res.Findings["armed"] != true || since.IsZero() || !until.After(since) {
		t.Errorf("findings armed %v, window %v..%v", res.Findings["armed"], since, until)
	}
	if files, _ := res.Findings["files"].([]string); len(files) != 5 { // 2 ranks, 2 tables, the front end
		t.Errorf("files %v, want the 5 the sim wrote", files)
	}
}

func TestProfileUnarmedIsOneFindingAndOneStart(t *testing.T) {
	f := newProfileFixture(t)
	tgt := startSim(t, f.log, vllmsim.Options{}) // no ProfilerDir: the routes do not exist
	p := buildTestProfile(t, Config{Duration: time.Second, Collect: Collect{Dir: t.TempDir()}})
	res, err := p.Run(context.Background(), f.input(t, tgt.host, nil))
	if err == nil || vocab.Classify(err).Retryable() || !errors.Is(err, errNotArmed) {
		t.Fatalf("err %v (reason %s): want profiler not armed, not retryable", err, vocab.Classify(err))
	}
	if res == nil || res.Findings["armed"] != false {
		t.Fatalf("result %+v: want armed=false", res)
	}
	how, _ := res.Findings["how_to_arm"].(string)
	if !strings.Contains(how, "--profiler-config") || !strings.Contains(how, "max_iterations") {
		t.Errorf("how_to_arm %q: want the --profiler-config with max_iterations", how)
	}
	if n := f.log.count("http:start_profile"); n != 1 {
		t.Errorf("start attempts %d, want exactly 1", n)
	}
	if n := f.log.count("http:stop_profile"); n != 0 {
		t.Errorf("stop sent %d times to a server with no profiler", n)
	}
	if f.guard.held("http://"+tgt.host) != nil || len(f.guard.contractViolations()) > 0 {
		t.Errorf("lease held or contract violated: %v", f.guard.contractViolations())
	}
}

// TestProfileRefusalSkipsWithKind: each kind of refusal is a skip whose
// reason starts with the kind and carries the detail, with the finding
// `refused: <kind>` (for `when`, the thread and the API); nothing is sent.
func TestProfileRefusalSkipsWithKind(t *testing.T) {
	for _, r := range []vocab.ProfileRefusal{
		{Reason: vocab.RefusedPaused, Detail: "paused by 10.0.0.5 at 14:02: bad deploy"},
		{Reason: vocab.RefusedBusy, Detail: "run r-1 is recording on http://x:1 since 14:00, stop by 14:01"},
		{Reason: vocab.RefusedBudget, Detail: "1 of profiling.max_concurrent 1 captures hold a target"},
		{Reason: vocab.RefusedCooldown, Detail: "http://x:1 was profiled at 14:00, cooldown 30m0s: next from 14:30"},
		{Reason: vocab.RefusedRecorded, Detail: "an earlier attempt of run r-1's step profile started a frame on http://x:1 at 14:00"},
	} {
		t.Run(r.Reason, func(t *testing.T) {
			f := newProfileFixture(t)
			tgt := startSim(t, f.log, vllmsim.Options{ProfilerDir: t.TempDir()})
			f.guard.refuse = &r
			p := buildTestProfile(t, Config{Duration: time.Second})
			res, err := p.Run(context.Background(), f.input(t, tgt.host, nil))
			why, ok := vocab.IsSkip(err)
			if !ok || why != r.Reason+": "+r.Detail {
				t.Fatalf("err %v: want a skip %q", err, r.Reason+": "+r.Detail)
			}
			if res == nil || res.Findings["refused"] != r.Reason || !strings.Contains(res.Summary, "refused ("+r.Reason+")") {
				t.Fatalf("result %+v: want the finding refused=%s and a summary naming it", res, r.Reason)
			}
			if n := f.log.count("http:start_profile"); n != 0 {
				t.Errorf("start sent %d times despite the refusal", n)
			}
		})
	}
}

func TestProfileOptOutSkips(t *testing.T) {
	for _, tc := range []struct {
		name   string
		labels map[string]string
		env    func(*vocab.Env, string)
		want   string
	}{
		{"label", map[string]string{"autocapture_profile": "off"}, func(*vocab.Env, string) {}, `autocapture_profile="off"`},
		{"configured label", map[string]string{"team_profile": "no"}, func(e *vocab.Env, _ string) {
			e.Profiling.OptOutLabel, e.Profiling.OptOutValue = "team_profile", "no"
		}, `team_profile="no"`},
		{"target", nil, func(e *vocab.Env, host string) { e.Profiling.OptOutTargets = []string{host} }, "opt_out.targets"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newProfileFixture(t)
			tgt := startSim(t, f.log, vllmsim.Options{ProfilerDir: t.TempDir()})
			tc.env(f.env, tgt.host)
			p := buildTestProfile(t, Config{Duration: time.Second})
			_, err := p.Run(context.Background(), f.input(t, tgt.host, tc.labels))
			if why, ok := vocab.IsSkip(err); !ok || !strings.Contains(why, tc.want) {
				t.Fatalf("err %v: want a skip saying %q", err, tc.want)
			}
			if ev := f.log.all(); len(ev) != 0 {
				t.Errorf("an opted-out target saw %v", ev)
			}
		})
	}
}

func TestProfileCancelledMidFrameStopsAtOnceAndKeepsThePartialProfile(t *testing.T) {
	f := newProfileFixture(t)
	dir := t.TempDir()
	tgt := startSim(t, f.log, vllmsim.Options{ProfilerDir: dir, ProfilerFlushDelay: 100 * time.Millisecond})
	p := buildTestProfile(t, Config{Duration: 25 * time.Second, Collect: Collect{Dir: dir}})
	ctx, cancel := context.WithCancelCause(context.Background())
	resolved := errors.New("the alert resolved")
	go func() {
		for f.log.count("http:start_profile 200") == 0 {
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(300 * time.Millisecond)
		cancel(resolved)
	}()
	res, err := p.Run(ctx, f.input(t, tgt.host, nil))
	if !errors.Is(err, resolved) || vocab.Classify(err) != vocab.ReasonCancelled {
		t.Fatalf("err %v (reason %s): want the cancellation's cause, cancelled", err, vocab.Classify(err))
	}
	if res == nil {
		t.Fatal("no partial result")
	}
	since, _ := res.Findings["since"].(time.Time)
	until, _ := res.Findings["until"].(time.Time)
	if until.Sub(since) > 10*time.Second {
		t.Errorf("frame %v..%v: the stop waited for the 25 s frame instead of the cancellation", since, until)
	}
	if cut, _ := res.Findings["cut_short"].(string); !strings.Contains(cut, "resolved") {
		t.Errorf("cut_short %q: want the cause", cut)
	}
	checkSimClean(t, tgt.sim, 1, 1)
	checkStored(t, f.store, res, dir)
	if f.guard.held("http://"+tgt.host) != nil || len(f.guard.contractViolations()) > 0 {
		t.Errorf("lease held or contract violated: %v", f.guard.contractViolations())
	}
}

func TestProfileOperatorStopEndsTheFrame(t *testing.T) {
	f := newProfileFixture(t)
	dir := t.TempDir()
	tgt := startSim(t, f.log, vllmsim.Options{ProfilerDir: dir, ProfilerFlushDelay: 50 * time.Millisecond})
	p := buildTestProfile(t, Config{Duration: 25 * time.Second, Collect: Collect{Dir: dir}})
	go func() {
		for f.log.count("http:start_profile 200") == 0 {
			time.Sleep(10 * time.Millisecond)
		}
		f.guard.held("http://" + tgt.host).requestStop()
	}()
	res, err := p.Run(context.Background(), f.input(t, tgt.host, nil))
	if err != nil {
		t.Fatal(err)
	}
	if cut, _ := res.Findings["cut_short"].(string); !strings.Contains(cut, "operator") {
		t.Errorf("cut_short %q, want the operator's stop", cut)
	}
	checkSimClean(t, tgt.sim, 1, 1)
}

// hangingTarget answers health and start, and never answers stop_profile
// (vLLM at TP=2 has hung over 20 minutes there).
func hangingTarget(t *testing.T, log *eventLog) string {
	t.Helper()
	release := make(chan struct{})
	srv := httptest.NewServer(logged(log, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stop_profile" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
	})))
	t.Cleanup(func() { close(release); srv.Close() })
	u, _ := url.Parse(srv.URL)
	return u.Host
}

func TestProfileHangingStopIsBoundedAndLeavesTheTargetLeased(t *testing.T) {
	f := newProfileFixture(t)
	host := hangingTarget(t, f.log)
	p := buildTestProfile(t, Config{Duration: 100 * time.Millisecond, StopTimeout: 300 * time.Millisecond,
		Collect: Collect{Dir: t.TempDir()}})
	res, err := p.Run(context.Background(), f.input(t, host, nil))
	if err == nil || vocab.Classify(err) != vocab.ReasonTimeout || !strings.Contains(err.Error(), "stop_timeout") {
		t.Fatalf("err %v (reason %s): want a stop_timeout", err, vocab.Classify(err))
	}
	if res == nil || !strings.Contains(res.Summary, "stays leased") {
		t.Errorf("summary %q: want the target said to stay leased", res.Summary)
	}
	l := f.guard.held("http://" + host)
	if l == nil {
		t.Fatal("the lease was released after a failed stop")
	}
	if state, released, why := l.snapshot(); state != vocab.LeaseStopFailed || released || !strings.Contains(why, "stop_timeout") {
		t.Errorf("lease %s (released %v, reason %q): want stop_failed, held, with the reason", state, released, why)
	}
	// A second firing gets no second start while the stop is unanswered.
	_, err = p.Run(context.Background(), f.input(t, host, nil))
	if why, ok := vocab.IsSkip(err); !ok || !strings.HasPrefix(why, "busy: ") {
		t.Errorf("second run: %v, want a busy skip", err)
	}
	if n := f.log.count("http:start_profile"); n != 1 {
		t.Errorf("start sent %d times, want 1", n)
	}
	if v := f.guard.contractViolations(); len(v) > 0 {
		t.Errorf("lease contract violated: %v", v)
	}
}

// TestProfileStopOnAServerThatLostItsProfiler: a server that restarted
// unarmed mid-frame answers the stop with 404: nothing records there, so
// the step says so and ends its lease (stopped, released) instead of leaving
// the target stop_failed for the sweeper to retry for ever.
func TestProfileStopOnAServerThatLostItsProfiler(t *testing.T) {
	t.Parallel()
	f := newProfileFixture(t)
	srv := httptest.NewServer(logged(f.log, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stop_profile" {
			http.NotFound(w, r)
		}
	})))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	p := buildTestProfile(t, Config{Duration: 100 * time.Millisecond, StopTimeout: time.Second,
		Collect: Collect{Dir: t.TempDir()}})
	res, err := p.Run(context.Background(), f.input(t, u.Host, nil))
	if err != nil {
		t.Fatalf("err %v: want the step to end normally, nothing recording", err)
	}
	if cut, _ := res.Findings["cut_short"].(string); !strings.Contains(cut, "no profiler now") {
		t.Errorf("cut_short %q: want the 404 said", cut)
	}
	if n := f.log.count("http:stop_profile"); n != 1 {
		t.Errorf("stop sent %d times, want 1", n)
	}
	if f.guard.held("http://"+u.Host) != nil {
		t.Error("the lease is still held after a 404 stop")
	}
	if v := f.guard.contractViolations(); len(v) > 0 {
		t.Errorf("lease contract violated: %v", v)
	}
}

func TestProfileResumedRecordingStopsFirstThenCollects(t *testing.T) {
	f := newProfileFixture(t)
	dir := t.TempDir()
	tgt := startSim(t, f.log, vllmsim.Options{ProfilerDir: dir, ProfilerFlushDelay: 50 * time.Millisecond})
	// An earlier attempt listed, recorded and started, then its replica died.
	before, err := listSource(context.Background(), profileDirSource(dir))
	if err != nil {
		t.Fatal(err)
	}
	// Straight to the sim, not through the log: the log is what the resumed step does.
	tgt.sim.Handler().ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/start_profile", nil))
	f.guard.resume = &vocab.Recording{Target: "http://" + tgt.host, State: vocab.LeaseRecording, Since: time.Now(),
		Deadline: time.Now().Add(time.Minute), Saved: savedListing{Files: before}.marshal()}
	time.Sleep(200 * time.Millisecond)
	p := buildTestProfile(t, Config{Duration: 5 * time.Second, Collect: Collect{Dir: dir}})
	res, err := p.Run(context.Background(), f.input(t, tgt.host, nil))
	if err != nil {
		t.Fatal(err)
	}
	if n := f.log.count("http:start_profile"); n != 0 {
		t.Errorf("the resumed step sent start %d times", n)
	}
	if n := f.log.count("http:stop_profile"); n != 1 {
		t.Errorf("stop sent %d times, want 1", n)
	}
	if res.Findings["resumed"] != vocab.LeaseRecording {
		t.Errorf("findings resumed %v", res.Findings["resumed"])
	}
	checkSimClean(t, tgt.sim, 1, 1)
	checkStored(t, f.store, res, dir)
	if f.guard.held("http://"+tgt.host) != nil || len(f.guard.contractViolations()) > 0 {
		t.Errorf("lease held or contract violated: %v", f.guard.contractViolations())
	}
}

func profileDirSource(dir string) profileSource {
	p := &Profile{cfg: Config{Collect: Collect{Dir: dir}}}
	src, _ := p.source(&vocab.Input{Env: &vocab.Env{}})
	return src
}

func TestProfileLoad(t *testing.T) {
	t.Parallel()
	load := &Load{Requests: 6, PromptTokens: 32, MaxTokens: 4}
	t.Run("never sent when requests are waiting", func(t *testing.T) {
		f := newProfileFixture(t)
		tgt := startSim(t, f.log, vllmsim.Options{ProfilerDir: t.TempDir(), ProfilerFlushDelay: 10 * time.Millisecond, Load: vllmsim.NoLoad})
		p := buildTestProfile(t, Config{Duration: 500 * time.Millisecond, Load: load})
		in := f.input(t, tgt.host, nil)
		in.Prior = map[string]*vocab.Result{"snapshot": {Signals: vocab.Signals{vocab.SigQueueDepth: 7}}, "scrape": {Signals: vocab.Signals{vocab.SigQueueDepth: 0}}}
		res, err := p.Run(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		if n := f.log.count("http:v1/completions"); n != 0 {
			t.Errorf("%d completions sent while 7 requests were waiting", n)
		}
		if why, _ := res.Findings["load"].(string); !strings.Contains(why, "waiting") {
			t.Errorf("load finding %v: want why it was not sent", res.Findings["load"])
		}
	})
	t.Run("sent during the frame when nothing waits", func(t *testing.T) {
		f := newProfileFixture(t)
		tgt := startSim(t, f.log, vllmsim.Options{Model: "m", ProfilerDir: t.TempDir(), ProfilerFlushDelay: 10 * time.Millisecond, Load: vllmsim.NoLoad})
		p := buildTestProfile(t, Config{Duration: 2 * time.Second, Load: load})
		res, err := p.Run(context.Background(), f.input(t, tgt.host, nil))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := res.Findings["load"].(map[string]int64)
		ev := f.log.all()
		start, stop := slices.Index(ev, "http:start_profile 200"), slices.Index(ev, "http:stop_profile")
		var during int
		for i, e := range ev {
			if e == "http:v1/completions" && (i < start || i > stop) {
				t.Errorf("a completion sent outside the frame at %d: %v", i, ev)
			}
			if e == "http:v1/completions 200" {
				during++
			}
		}
		if got["ok"] == 0 || int64(during) != got["ok"] {
			t.Errorf("load %v (%v), the target answered %d: want the answered ones counted", got, res.Findings["load_error"], during)
		}
	})
}

func TestProfileCollectsOnlyNewOrGrownFilesIncludingLateOnes(t *testing.T) {
	f := newProfileFixture(t)
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Error(err)
		}
	}
	write("old.pt.trace.json", `{"traceEvents":[]}`)
	write("profiler_out_0.txt", "table")
	srv := httptest.NewServer(logged(f.log, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stop_profile" {
			write("profiler_out_0.txt", "a longer table") // rewritten: grew
			go func() {                                   // written after the stop answered
				time.Sleep(300 * time.Millisecond)
				write("late.pt.trace.json", `{"traceEvents":[{"ph":"X"}]}`)
			}()
		}
	})))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	p := buildTestProfile(t, Config{Duration: 100 * time.Millisecond, Collect: Collect{Dir: dir, RemoveAfterUpload: true}})
	p.tune.poll = 200 * time.Millisecond // the late file lands between two polls
	res, err := p.Run(context.Background(), f.input(t, u.Host, nil))
	if err != nil {
		t.Fatal(err)
	}
	got := res.Findings["files"].([]string)
	if want := []string{"late.pt.trace.json", "profiler_out_0.txt"}; !slices.Equal(got, want) {
		t.Errorf("collected %v, want %v (not the unchanged old trace)", got, want)
	}
	left, _ := os.ReadDir(dir)
	if len(left) != 1 || left[0].Name() != "old.pt.trace.json" {
		t.Errorf("left in the folder: %v, want only the old trace (remove_after_upload)", left)
	}
}

func TestProfileBuildValidates(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"path in target", Config{Target: "http://10.0.0.7:8000/v1"}, "without a path"},
		{"no port", Config{Target: "http://10.0.0.7"}, "explicit port"},
		{"host only", Config{Target: "10.0.0.7:8000"}, "scheme"},
		{"userinfo", Config{Target: "http://u:p@10.0.0.7:8000"}, "nothing more"},
		{"query", Config{Target: "http://10.0.0.7:8000?x=1"}, "nothing more"},
		{"ftp", Config{Target: "ftp://10.0.0.7:21"}, "http or https"},
		{"expect", Config{Expect: "nsys"}, "torch or cuda"},
		{"negative duration", Config{Duration: -time.Second}, "duration"},
		{"both collects", Config{Collect: Collect{Dir: "/p", Agent: "http://a:9101"}}, "not both"},
		{"agent with path", Config{Collect: Collect{Agent: "http://a:9101/files"}}, "collect agent"},
		{"remove without source", Config{Collect: Collect{RemoveAfterUpload: true}}, "needs dir or agent"},
		{"load without requests", Config{Load: &Load{}}, "load"},
		{"too much load", Config{Load: &Load{Requests: 100000}}, "load"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := buildProfile(&tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want it to say %q", err, tc.want)
			}
		})
	}
	st, err := buildProfile(&Config{Target: "https://10.0.0.7:8000/"})
	if err != nil {
		t.Fatal(err)
	}
	if c := st.(*Profile).cfg; c.Duration != profileDefaultDuration || c.StopTimeout != profileDefaultStopTimeout || c.Expect != ExpectTorch {
		t.Errorf("defaults %+v", c)
	}
}

func TestProfileDurationIsCapped(t *testing.T) {
	f := newProfileFixture(t)
	f.env.Profiling.MaxDuration = 200 * time.Millisecond
	tgt := startSim(t, f.log, vllmsim.Options{ProfilerDir: t.TempDir(), ProfilerFlushDelay: 10 * time.Millisecond})
	p := buildTestProfile(t, Config{Duration: time.Minute})
	res, err := p.Run(context.Background(), f.input(t, tgt.host, nil))
	if err != nil {
		t.Fatal(err)
	}
	if res.Findings["duration"] != "200ms" || res.Findings["duration_capped"] == nil {
		t.Errorf("duration %v (capped %v): want the daemon's cap", res.Findings["duration"], res.Findings["duration_capped"])
	}
}

func TestProfileWithoutGuardIsBadConfig(t *testing.T) {
	p := buildTestProfile(t, Config{})
	_, err := p.Run(context.Background(), &vocab.Input{Alert: template.Alert{Labels: template.KV{"instance": "127.0.0.1:1"}},
		Env: &vocab.Env{Targets: &http.Client{}}})
	if vocab.Classify(err) != vocab.ReasonBadConfig {
		t.Errorf("err %v: want bad-config", err)
	}
}

// TestProfileReportReadsTheRegressionAgainstABaseline: a healthy capture
// kept as the baseline, then the unexplained scenario's GEMM regression;
// the second report's top family is GEMM and it is compared with the first.
func TestProfileReportReadsTheRegressionAgainstABaseline(t *testing.T) {
	t.Parallel()
	f := newProfileFixture(t)
	capture := func(scenario string, baseline bool) *vocab.Result {
		dir := t.TempDir()
		tgt := startSim(t, f.log, vllmsim.Options{Model: "m", Scenario: scenario, ProfilerDir: dir,
			ProfilerFlushDelay: 50 * time.Millisecond, Seed: 3})
		time.Sleep(500 * time.Millisecond) // traffic under way
		// The unexplained scenario's everyday traffic is light (0.5 rps): the
		// step's representative load makes sure the frame sees iterations.
		p := buildTestProfile(t, Config{Duration: 2 * time.Second, Baseline: baseline, Collect: Collect{Dir: dir},
			Load: &Load{Requests: 4, PromptTokens: 256, MaxTokens: 32}})
		in := f.input(t, tgt.host, nil)
		in.RunID = "run-" + scenario
		res, err := p.Run(context.Background(), in)
		if err != nil {
			t.Fatalf("%s: %v", scenario, err)
		}
		return res
	}
	healthy := capture(vllmsim.ScenarioHealthy, true)
	if healthy.Findings["compared_with"] != nil {
		t.Errorf("the first capture was compared with %v", healthy.Findings["compared_with"])
	}
	if pf := healthy.Profile; pf == nil || pf.HasBaseline || !strings.Contains(pf.Text(), "no healthy baseline to compare") {
		t.Errorf("first capture's finding %+v: want one with no baseline, saying so", pf)
	}
	slow := capture(vllmsim.ScenarioUnexplained, false)
	if slow.Findings["top_family"] != string(torchtrace.FamilyGEMM) {
		t.Errorf("top family %v, want gemm (families %v)", slow.Findings["top_family"], slow.Findings["families"])
	}
	fams := slow.Findings["families"].(map[string]float64)
	base := healthy.Findings["families"].(map[string]float64)
	if fams["gemm"] <= base["gemm"] {
		t.Errorf("gemm share %.2f under the regression vs %.2f healthy", fams["gemm"], base["gemm"])
	}
	cw, _ := slow.Findings["compared_with"].(map[string]any)
	if cw == nil || cw["baseline"] != true {
		t.Errorf("compared_with %v: want the kept baseline", slow.Findings["compared_with"])
	}
	if !strings.Contains(slow.Summary, "baseline") {
		t.Errorf("summary %q: want the baseline comparison", slow.Summary)
	}
	// The finding the verdict carries: GEMM's share against the baseline's.
	pf := slow.Profile
	if pf == nil || pf.Family != "gemm" || !pf.HasBaseline || pf.Share != fams["gemm"] || pf.BaselineShare != base["gemm"] ||
		pf.TopKernel == "" || len(pf.Shift) == 0 || !strings.HasSuffix(pf.Report, "/"+profileReportName) || pf.Step != "profile" {
		t.Errorf("finding %+v: want GEMM %.2f vs %.2f in the baseline, the top kernel, the shift and the report", pf, fams["gemm"], base["gemm"])
	} else if want := fmt.Sprintf("profile: GEMM %.0f%% of GPU time vs %.0f%% in the healthy baseline (top kernel ", 100*pf.Share, 100*pf.BaselineShare); !strings.HasPrefix(pf.Text(), want) {
		t.Errorf("finding says %q, want it to start %q", pf.Text(), want)
	}
	if kernels, _ := slow.Findings["top_kernels"].([]map[string]any); len(kernels) == 0 {
		t.Error("no top kernels")
	}
	if idle, ok := slow.Findings["idle_share"].(float64); !ok || idle < 0 || idle > 1 {
		t.Errorf("idle share %v", slow.Findings["idle_share"])
	}
}

// TestProfileReportComparesBeforeKeeping feeds the report analyses of its
// own making (no torchtrace needed): the baseline is read before this
// capture is kept, a kept baseline wins over a later capture, and a cut-short
// frame is never kept.
func TestProfileReportComparesBeforeKeeping(t *testing.T) {
	f := newProfileFixture(t)
	p := buildTestProfile(t, Config{Baseline: true})
	rep := func(gemm float64) *torchtrace.Report {
		return &torchtrace.Report{Files: 1, KernelUS: 1000, IdleShare: 0.1,
			Families:   map[torchtrace.Family]float64{torchtrace.FamilyGEMM: gemm, torchtrace.FamilyOther: 1 - gemm},
			TopKernels: []torchtrace.Entry{{Name: "sm90_xmma_gemm", Family: torchtrace.FamilyGEMM, GPUus: 1000 * gemm, Share: gemm}}}
	}
	run := func(runID string, r *torchtrace.Report, cut string) *vocab.Result {
		in := f.input(t, "127.0.0.1:1", nil)
		in.RunID = runID
		res := &vocab.Result{Findings: map[string]any{}}
		fr := &frameRun{target: "http://127.0.0.1:1", cut: cut, window: torchtrace.Window{Start: time.Now(), End: time.Now().Add(time.Second)}}
		p.report(context.Background(), in, res, fr, []collected{{Name: "rank0.pt.trace.json.gz", Bytes: 10, Report: r}})
		return res
	}
	first := run("run-a", rep(0.38), "")
	if first.Findings["compared_with"] != nil || first.Findings["top_family"] != "other" {
		t.Errorf("first: compared_with %v, top family %v", first.Findings["compared_with"], first.Findings["top_family"])
	}
	p.cfg.Baseline = false
	second := run("run-b", rep(0.81), "")
	cw, _ := second.Findings["compared_with"].(map[string]any)
	if cw == nil || cw["run_id"] != "run-a" || second.Findings["top_family"] != "gemm" {
		t.Errorf("second: compared_with %v, top family %v", cw, second.Findings["top_family"])
	}
	third := run("run-c", rep(0.9), "the alert resolved")
	if cw, _ := third.Findings["compared_with"].(map[string]any); cw == nil || cw["run_id"] != "run-a" {
		t.Errorf("third: compared with %v, want the kept baseline run-a over the later run-b", cw)
	}
	kept := f.guard.kept["m"]
	if len(kept) != 2 || !kept[0].Baseline || kept[1].Baseline {
		t.Errorf("kept %+v: want run-a (baseline) and run-b, not the cut-short run-c", kept)
	}
	var names []string
	for _, a := range third.Artifacts {
		names = append(names, a.Name)
	}
	if !slices.Contains(names, profileReportName) {
		t.Errorf("artifacts %v: want %s", names, profileReportName)
	}
}
