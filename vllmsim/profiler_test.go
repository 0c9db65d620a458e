package vllmsim

import (
	"compress/gzip"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func post(t *testing.T, h http.Handler, path string) int {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", path, nil))
	if rec.Code == http.StatusOK && rec.Body.Len() != 0 && path != "/admin/scenario" {
		t.Errorf("POST %s: body %q, vLLM answers an empty 200", path, rec.Body.String())
	}
	return rec.Code
}

func TestProfilerUnarmedAnswers404(t *testing.T) {
	s, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/start_profile", "/stop_profile"} {
		if code := post(t, s.Handler(), p); code != http.StatusNotFound {
			t.Errorf("POST %s unarmed: %d, want 404", p, code)
		}
	}
	if st := s.Profiler(); st.Armed {
		t.Errorf("unarmed sim reports armed: %+v", st)
	}
}

// TestProfilerProtocol drives the armed profiler through every violation
// and a normal frame, and checks what GET /admin/profiler reports.
func TestProfilerProtocol(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := New(Options{ProfilerDir: dir, ProfilerFlushDelay: 300 * time.Millisecond,
		ProfilerMaxRecording: 5 * time.Second, TensorParallel: 2, ProfilerLayers: 4, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	if code := post(t, h, "/stop_profile"); code != http.StatusOK {
		t.Fatalf("stop while idle: %d", code)
	}
	post(t, h, "/start_profile")
	s.Advance(3 * time.Second)
	post(t, h, "/start_profile") // ignored, counted
	s.Advance(3 * time.Second)   // past the 5 s limit

	begun := time.Now()
	stopped := make(chan int)
	go func() { stopped <- post(t, h, "/stop_profile") }()
	waitState(t, s, "flushing")
	post(t, h, "/start_profile") // waits for the flush, then records
	if code := <-stopped; code != http.StatusOK {
		t.Fatalf("stop: %d", code)
	}
	if took := time.Since(begun); took < 300*time.Millisecond {
		t.Errorf("stop returned after %v, before the flush delay", took)
	}
	s.Advance(time.Second)
	post(t, h, "/stop_profile")

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/admin/profiler", nil))
	var st ProfilerStatus
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{ViolationStopWhileIdle: 1, ViolationStartWhileRecording: 1,
		ViolationRecordingPastLimit: 1, ViolationStartWhileFlushing: 1}
	for k, n := range want {
		if st.Violations[k] != n {
			t.Errorf("violation %s: %d, want %d (all: %v)", k, st.Violations[k], n, st.Violations)
		}
	}
	if st.Starts != 2 || st.Stops != 2 || st.State != "idle" {
		t.Errorf("starts %d stops %d state %s, want 2, 2, idle", st.Starts, st.Stops, st.State)
	}
	// Per stop: 2 rank traces, 2 tables, 1 front-end trace (tables rewritten).
	if st.FilesWritten != 10 {
		t.Errorf("files written %d, want 10: %v", st.FilesWritten, st.Files)
	}
	checkProfileFiles(t, dir)
}

func waitState(t *testing.T, s *Sim, state string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if s.Profiler().State == state {
			return
		}
	}
	t.Fatalf("profiler never %s", state)
}

var (
	rankFile  = regexp.MustCompile(`^dp0_pp0_tp(\d)_dcp0_ep0_rank(\d)\.\d{13}\.pt\.trace\.json\.gz$`)
	frontFile = regexp.MustCompile(`^.+_\d+\.async_llm\.\d{13}\.pt\.trace\.json\.gz$`)
	tableFile = regexp.MustCompile(`^profiler_out_\d\.txt$`)
)

// checkProfileFiles checks every file has vLLM's naming and every trace is
// gzip Chrome-trace JSON of the shape Perfetto loads.
func checkProfileFiles(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var ranks, fronts, tables int
	for _, e := range entries {
		switch name := e.Name(); {
		case rankFile.MatchString(name):
			ranks++
			evs := readTrace(t, filepath.Join(dir, name))
			if countKernels(evs) == 0 {
				t.Errorf("%s: no kernel events", name)
			}
		case frontFile.MatchString(name):
			fronts++
			readTrace(t, filepath.Join(dir, name))
		case tableFile.MatchString(name):
			tables++
			b, _ := os.ReadFile(filepath.Join(dir, name))
			if !strings.Contains(string(b), "Self CUDA time total") || !strings.Contains(string(b), "gemm") {
				t.Errorf("%s: not a kernel table:\n%s", name, b)
			}
		default:
			t.Errorf("unexpected file %s", name)
		}
	}
	if ranks != 4 || fronts != 2 || tables != 2 {
		t.Errorf("rank traces %d, front-end traces %d, tables %d; want 4, 2, 2", ranks, fronts, tables)
	}
}

// event is a Chrome trace event with every field optional, to check presence.
type event struct {
	Ph   *string         `json:"ph"`
	Name string          `json:"name"`
	Cat  string          `json:"cat"`
	Ts   *float64        `json:"ts"`
	Dur  *float64        `json:"dur"`
	Pid  json.RawMessage `json:"pid"` // a number, or a string for the profiler's own rows ("Spans")
	Tid  json.RawMessage `json:"tid"`
	Args json.RawMessage `json:"args"`
}

func readTrace(t *testing.T, path string) []event {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: not gzip: %v", path, err)
	}
	var tr struct {
		TraceEvents []event `json:"traceEvents"`
	}
	if err := json.NewDecoder(zr).Decode(&tr); err != nil {
		t.Fatalf("%s: not JSON: %v", path, err)
	}
	if len(tr.TraceEvents) == 0 {
		t.Fatalf("%s: no traceEvents", path)
	}
	for i, e := range tr.TraceEvents {
		if e.Ph == nil || len(e.Pid) == 0 || len(e.Tid) == 0 {
			t.Fatalf("%s: event %d lacks ph/pid/tid: %+v", path, i, e)
		}
		switch *e.Ph {
		case "X":
			if e.Ts == nil || e.Dur == nil || *e.Dur < 0 || e.Name == "" {
				t.Fatalf("%s: complete event %d lacks ts/dur/name: %+v", path, i, e)
			}
		case "M":
			if len(e.Args) == 0 {
				t.Fatalf("%s: metadata event %d without args", path, i)
			}
		case "s", "f": // ac2g flows from a launch to its kernel
			if e.Ts == nil || e.Cat != "ac2g" {
				t.Fatalf("%s: flow event %d lacks ts or cat ac2g: %+v", path, i, e)
			}
		case "i": // the profiler's iteration start and window end
			if e.Ts == nil || e.Name == "" {
				t.Fatalf("%s: instant event %d lacks ts or name: %+v", path, i, e)
			}
		default:
			t.Fatalf("%s: event %d has phase %q", path, i, *e.Ph)
		}
	}
	return tr.TraceEvents
}

func countKernels(evs []event) int {
	n := 0
	for _, e := range evs {
		if e.Cat == "kernel" {
			n++
		}
	}
	return n
}

// TestProfileExplainsUnexplained: the unexplained scenario's GEMM
// regression is what its profile shows, next to a healthy profile.
func TestProfileExplainsUnexplained(t *testing.T) {
	gemmAvg := func(scenario string) float64 {
		dir := t.TempDir()
		s, err := New(Options{Scenario: scenario, ProfilerDir: dir, ProfilerFlushDelay: time.Millisecond, ProfilerLayers: 4, Seed: 2})
		if err != nil {
			t.Fatal(err)
		}
		s.Advance(20 * time.Second)
		post(t, s.Handler(), "/start_profile")
		s.Advance(5 * time.Second)
		post(t, s.Handler(), "/stop_profile")
		matches, _ := filepath.Glob(filepath.Join(dir, "dp0_*.pt.trace.json.gz"))
		if len(matches) != 1 {
			t.Fatalf("%s: rank traces %v", scenario, matches)
		}
		var sum float64
		var n int
		for _, e := range readTrace(t, matches[0]) {
			if e.Name == kernelGEMM {
				sum += *e.Dur
				n++
			}
		}
		if n == 0 {
			t.Fatalf("%s: no GEMM kernels", scenario)
		}
		return sum / float64(n)
	}
	healthy, regressed := gemmAvg(ScenarioHealthy), gemmAvg(ScenarioUnexplained)
	if regressed < 5*healthy {
		t.Errorf("GEMM mean %.0f µs under the regression vs %.0f µs healthy: the profile does not show it", regressed, healthy)
	}
}
