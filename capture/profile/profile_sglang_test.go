package profile

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/agent"
	"github.com/autocapture/autocapture/vllmsim"
	"github.com/autocapture/autocapture/vocab"
)

// sglangSim is an SGLang sim in real time; its default output folder is
// not the collect folder, so only a step that sends output_dir finds files.
func sglangSim(t *testing.T, log *eventLog, o vllmsim.Options) *simTarget {
	t.Helper()
	o.Engine = vocab.EngineSGLang
	if o.ProfilerDir == "" {
		o.ProfilerDir = t.TempDir()
	}
	if o.ProfilerLayers == 0 {
		o.ProfilerLayers = 4
	}
	if o.ProfilerExportRate == 0 {
		o.ProfilerExportRate = 50e6
	}
	return startSim(t, log, o)
}

// waitProfiler polls the sim's profiler until cond holds.
func waitProfiler(t *testing.T, sim *vllmsim.Sim, what string, cond func(vllmsim.ProfilerStatus) bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond(sim.Profiler()) {
			return
		}
	}
	t.Fatalf("the sim's profiler never got %s: %+v", what, sim.Profiler())
}

// TestProfileSGLangFrame: the step sends SGLang's body (output_dir, CPU+GPU,
// this capture's prefix), one start and one stop, collects only this
// capture's per-rank files (not another capture's that appeared in the
// shared folder meanwhile, nor an export's temporary), from the folder or
// through an agent, reads each rank with torchtrace and releases the lease.
func TestProfileSGLangFrame(t *testing.T) {
	for _, via := range []string{"dir", "agent"} {
		t.Run(via, func(t *testing.T) {
			f := newProfileFixture(t)
			out := t.TempDir()
			tgt := sglangSim(t, f.log, vllmsim.Options{TensorParallel: 2})
			cfg := Config{Engine: vocab.EngineSGLang, Duration: 600 * time.Millisecond, Collect: Collect{Dir: out}}
			if via == "agent" {
				h, err := agent.NewServer(agent.Dir{Path: out}, "agent-token")
				if err != nil {
					t.Fatal(err)
				}
				srv := httptest.NewServer(h)
				t.Cleanup(srv.Close)
				f.env.Profiling.AgentToken = "agent-token"
				cfg.Collect, cfg.OutputDir = Collect{Agent: srv.URL}, out
			}
			p := buildTestProfile(t, cfg)
			in := f.input(t, tgt.host, nil)
			go func() { // another capture's file and a half-written export land meanwhile
				for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
					if tgt.sim.Profiler().State == "recording" {
						break
					}
				}
				_ = os.WriteFile(filepath.Join(out, "someone-1764790000.25-TP-0.trace.json.gz"), []byte("not ours"), 0o644)
				_ = os.WriteFile(filepath.Join(out, "."+capturePrefix(in.RunID, in.StepID)+"-1.0-TP-0.trace.json.gz.tmp"), []byte("half"), 0o644)
			}()
			res, err := p.Run(context.Background(), in)
			if err != nil {
				t.Fatalf("run: %v (%+v)", err, res)
			}
			checkSimClean(t, tgt.sim, 1, 1)
			if n := f.log.count("http:start_profile"); n != 1 {
				t.Errorf("start sent %d times", n)
			}
			files, _ := res.Findings["files"].([]string)
			if len(files) != 2 {
				t.Fatalf("collected %v, want the 2 rank traces", files)
			}
			prefix := capturePrefix(in.RunID, in.StepID)
			for _, name := range files {
				if !strings.HasPrefix(name, prefix+"-") || !strings.Contains(name, "-TP-") || !strings.HasSuffix(name, ".trace.json.gz") {
					t.Errorf("collected %q: not this capture's SGLang rank file (prefix %s)", name, prefix)
				}
			}
			if left, _ := os.ReadDir(tgt.dir); len(left) != 0 {
				t.Errorf("files in the server's default folder: output_dir was not sent")
			}
			if res.Findings["engine"] != vocab.EngineSGLang || res.Findings["top_family"] == nil {
				t.Errorf("findings %v: want engine sglang and an analysis", res.Findings)
			}
			if _, notRead := res.Findings["not_analysed"]; notRead {
				t.Errorf("a rank trace was not read: %v", res.Findings["not_analysed"])
			}
			if l := f.guard.held("http://" + tgt.host); l != nil {
				t.Errorf("the lease is still held")
			}
			if v := f.guard.contractViolations(); len(v) > 0 {
				t.Errorf("lease contract violated: %v", v)
			}
		})
	}
}

// TestProfileSGLangAutoStopIsDone: with num_steps the server stops the
// recording itself mid-frame; the step's stop then answers "not in
// progress" (a bare 500), which is done: the lease is released, not left
// stop_failed, and the auto-stopped files are collected.
func TestProfileSGLangAutoStopIsDone(t *testing.T) {
	f := newProfileFixture(t)
	out := t.TempDir()
	tgt := sglangSim(t, f.log, vllmsim.Options{})
	p := buildTestProfile(t, Config{Engine: vocab.EngineSGLang, NumSteps: 3, Duration: time.Second, Collect: Collect{Dir: out}})
	res, err := p.Run(context.Background(), f.input(t, tgt.host, nil))
	if err != nil {
		t.Fatalf("run: %v (%+v)", err, res)
	}
	if n := f.log.count("http:stop_profile 500"); n != 1 {
		t.Fatalf("stop answers %v: want one 500 (not in progress)", f.log.all())
	}
	if res.Findings["already_stopped"] == nil {
		t.Errorf("findings %v: want already_stopped", res.Findings)
	}
	if files, _ := res.Findings["files"].([]string); len(files) != 1 {
		t.Errorf("collected %v, want the auto-stopped rank trace", files)
	}
	if l := f.guard.held("http://" + tgt.host); l != nil {
		t.Errorf("the lease is still held (%s): an auto-stopped recording is done", l.state)
	}
	if st := tgt.sim.Profiler(); st.State != "idle" || st.Starts != 1 || st.FilesWritten != 1 {
		t.Errorf("sim %+v", st)
	}
}

// TestProfileSGLangStartRefusedSendsNoStop: a server already recording for
// someone else refuses the start (500); SGLang started nothing for us, so
// no stop goes out (it would end the other recording) and the lease ends
// as never started.
func TestProfileSGLangStartRefusedSendsNoStop(t *testing.T) {
	f := newProfileFixture(t)
	tgt := sglangSim(t, f.log, vllmsim.Options{})
	// The operator's start reaches the sim beside the logged server (the
	// fake lease reads the log's starts as the step's).
	rec := httptest.NewRecorder()
	tgt.sim.Handler().ServeHTTP(rec, httptest.NewRequest("POST", "/start_profile", strings.NewReader(`{"profile_prefix":"operator"}`)))
	if rec.Code != http.StatusOK {
		t.Fatalf("the operator's start: %d", rec.Code)
	}
	p := buildTestProfile(t, Config{Engine: vocab.EngineSGLang, Duration: 200 * time.Millisecond})
	res, err := p.Run(context.Background(), f.input(t, tgt.host, nil))
	if err == nil || vocab.Classify(err) != vocab.ReasonUpstream5xx {
		t.Fatalf("run: %v, want the start's 5xx", err)
	}
	if n := f.log.count("http:stop_profile"); n != 0 {
		t.Errorf("a stop was sent (%v): it ends the operator's recording", f.log.all())
	}
	if st := tgt.sim.Profiler(); st.State != "recording" || st.LastError != vllmsim.SGLangErrAlreadyInProgress {
		t.Errorf("sim %+v: the operator's recording must go on", st)
	}
	if res.Findings["start_refused"] == nil || f.log.count("lease:not_started") != 1 {
		t.Errorf("findings %v, lease events %v", res.Findings, f.log.all())
	}
}

// TestStopRecordingSpeaksTheSavedEngine: the sweeper's stop decodes the
// engine the step saved: SGLang's "not in progress" 500 is done, vLLM's 500
// a failure, a row saved before engines existed is vLLM's.
func TestStopRecordingSpeaksTheSavedEngine(t *testing.T) {
	log := &eventLog{}
	tgt := sglangSim(t, log, vllmsim.Options{})
	ctx := context.Background()
	sg, _ := json.Marshal(savedListing{Engine: vocab.EngineSGLang, Prefix: "p"})
	if err := StopRecording(ctx, http.DefaultClient, tgt.srv.URL, sg); err != nil {
		t.Errorf("sglang, nothing recording: %v, want done", err)
	}
	for _, saved := range [][]byte{nil, []byte(`{"files":{}}`), []byte(`{"files":{},"engine":"vllm"}`)} {
		err := StopRecording(ctx, http.DefaultClient, tgt.srv.URL, saved)
		var st *statusError
		if !errors.As(err, &st) || st.code != http.StatusInternalServerError {
			t.Errorf("saved %s: %v, want vLLM's reading: HTTP 500 is a failure", saved, err)
		}
	}
	if n := log.count("http:stop_profile 500"); n != 4 {
		t.Errorf("stops %v", log.all())
	}
}

func TestProfileSGLangBuildValidates(t *testing.T) {
	for name, cfg := range map[string]Config{
		"unknown engine":       {Engine: "tgi"},
		"output_dir on vllm":   {OutputDir: "/p"},
		"num_steps on vllm":    {NumSteps: 10},
		"negative num_steps":   {Engine: vocab.EngineSGLang, NumSteps: -1},
		"explicit vllm + dirs": {Engine: vocab.EngineVLLM, OutputDir: "/p"},
	} {
		if _, err := buildProfile(&cfg); err == nil {
			t.Errorf("%s: built", name)
		}
	}
	st, err := buildProfile(&Config{Engine: vocab.EngineSGLang, OutputDir: "/srv/prof", NumSteps: 500})
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	if err := json.Unmarshal(st.(*Profile).sglangStartBody("autocapture-r-s"), &body); err != nil {
		t.Fatal(err)
	}
	if body["output_dir"] != "/srv/prof" || body["num_steps"] != float64(500) || body["profile_prefix"] != "autocapture-r-s" {
		t.Errorf("body %v", body)
	}
	if acts, _ := body["activities"].([]any); len(acts) != 2 || acts[0] != "CPU" || acts[1] != "GPU" {
		t.Errorf("activities %v, want CPU and GPU", body["activities"])
	}
	if got := capturePrefix("run/../x y", "step:1"); got != "autocapture-run..xy-step1" {
		t.Errorf("prefix %q: only [A-Za-z0-9._-] may reach a file name", got)
	}
}

// TestSGLangWantedFiles: this capture's prefixed rank files are taken, not
// another capture's nor an export's temporary; when no file took the
// prefix (a build that ignores profile_prefix), the new unprefixed rank
// files are this frame's; files there before are never taken.
func TestSGLangWantedFiles(t *testing.T) {
	p := buildTestProfile(t, Config{Engine: vocab.EngineSGLang})
	const pre = "autocapture-r-s"
	before := listing{"1764790000.5-TP-0.trace.json.gz": 10}
	for name, tc := range map[string]struct {
		now  listing
		want []string
	}{
		"prefixed": {listing{pre + "-1764790001.25-TP-0.trace.json.gz": 5, pre + "-1764790001.25-TP-1-DECODE.trace.json.gz": 5,
			"other-1764790001.3-TP-0.trace.json.gz": 5, "1764790001.4-TP-0.trace.json.gz": 5, "." + pre + "-1.0-TP-0.trace.json.gz.tmp": 1},
			[]string{pre + "-1764790001.25-TP-0.trace.json.gz", pre + "-1764790001.25-TP-1-DECODE.trace.json.gz"}},
		"prefix ignored": {listing{"1764790000.5-TP-0.trace.json.gz": 10, "1764790002.75-TP-0-DP-1.trace.json.gz": 7, "1764790002.75-TP-1.trace.json.gz": 7,
			"1764790002.75-TP-0-memory.pickle": 3},
			[]string{"1764790002.75-TP-0-DP-1.trace.json.gz", "1764790002.75-TP-1.trace.json.gz"}},
	} {
		t.Run(name, func(t *testing.T) {
			var got []string
			for _, f := range p.wanted(before, tc.now, pre) {
				got = append(got, f.Name)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("wanted %v, want %v", got, tc.want)
			}
		})
	}
}

// TestProfileSGLangLoadReadsItsQueue holds the load guard to SGLang's
// /metrics: it reads sglang:num_queue_reqs (vLLM's num_requests_waiting is
// absent there, which read as "could not be read" and never sent load to an
// idle SGLang server), sends the load to an idle one and none to one whose
// queue holds requests, without the triage's signals to go by.
func TestProfileSGLangLoadReadsItsQueue(t *testing.T) {
	t.Parallel()
	load := &Load{Requests: 4, PromptTokens: 32, MaxTokens: 4}
	t.Run("idle: sent", func(t *testing.T) {
		f := newProfileFixture(t)
		tgt := sglangSim(t, f.log, vllmsim.Options{Model: "m", Load: vllmsim.NoLoad})
		p := buildTestProfile(t, Config{Engine: vocab.EngineSGLang, Duration: time.Second, Load: load, Collect: Collect{Dir: tgt.dir}})
		res, err := p.Run(context.Background(), f.input(t, tgt.host, nil))
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := res.Findings["load"].(map[string]int64); got["ok"] == 0 {
			t.Errorf("load %v (%v): want completions sent to an idle SGLang server", res.Findings["load"], res.Findings["load_error"])
		}
	})
	t.Run("queued: not sent", func(t *testing.T) {
		f := newProfileFixture(t)
		tgt := sglangSim(t, f.log, vllmsim.Options{Model: "m", Scenario: vllmsim.ScenarioOverload})
		waitQueued(t, tgt)
		p := buildTestProfile(t, Config{Engine: vocab.EngineSGLang, Duration: 500 * time.Millisecond, Load: load, Collect: Collect{Dir: tgt.dir}})
		res, err := p.Run(context.Background(), f.input(t, tgt.host, nil))
		if err != nil {
			t.Fatal(err)
		}
		if why, _ := res.Findings["load"].(string); !strings.Contains(why, "requests waiting on") {
			t.Errorf("load finding %v: want it not sent, naming the waiting requests", res.Findings["load"])
		}
	})
}

// waitQueued waits until the SGLang sim's /metrics shows a deep queue.
func waitQueued(t *testing.T, tgt *simTarget) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get("http://" + tgt.host + "/metrics")
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(b), "\n") {
			// A deep queue, not the first few waiting: early on the queue
			// still drains between log points and may read 0 at the next.
			if v, ok := strings.CutPrefix(line, "sglang:num_queue_reqs{"); ok {
				if n, err := strconv.ParseFloat(v[strings.LastIndex(v, " ")+1:], 64); err == nil && n >= 20 {
					return
				}
			}
		}
	}
	t.Fatal("the overloaded SGLang sim showed no deep queue (≥ 20 waiting) within 20 s")
}
