package vllmsim

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func postJSON(t *testing.T, h http.Handler, path, body string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", path, strings.NewReader(body)))
	return rec.Code, rec.Body.String()
}

func armed(t *testing.T, o Options) (*Sim, http.Handler) {
	t.Helper()
	o.ProfilerDir = t.TempDir()
	o.ProfilerLayers = 1
	if o.ProfilerFlushDelay == 0 {
		o.ProfilerFlushDelay = 20 * time.Millisecond
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return s, s.Handler()
}

func rankTraces(t *testing.T, s *Sim) []string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(s.opts.ProfilerDir, "dp0_*.pt.trace.json.gz"))
	return m
}

func TestFaultStopHangs(t *testing.T) {
	s, h := armed(t, Options{Seed: 1})
	if code, body := postJSON(t, h, "/admin/profiler/faults", `{"stop_hang": "400ms"}`); code != 200 || !strings.Contains(body, `"stop_hang":"400ms"`) {
		t.Fatalf("set faults: %d %s", code, body)
	}
	post(t, h, "/start_profile")
	s.Advance(time.Second)
	begun := time.Now()
	done := make(chan int)
	go func() { done <- post(t, h, "/stop_profile") }()
	waitState(t, s, "flushing")
	select {
	case <-done:
		t.Fatal("stop returned while it should hang")
	case <-time.After(200 * time.Millisecond):
	}
	if s.Profiler().State != "flushing" || len(rankTraces(t, s)) != 0 {
		t.Errorf("mid-hang: state %s, files %v", s.Profiler().State, rankTraces(t, s))
	}
	if code := <-done; code != 200 {
		t.Fatalf("stop: %d", code)
	}
	if took := time.Since(begun); took < 420*time.Millisecond {
		t.Errorf("stop took %v, want the hang plus the flush (420ms)", took)
	}
	if st := s.Profiler(); st.State != "idle" || len(rankTraces(t, s)) != 1 {
		t.Errorf("after the hang: state %s, files %v", st.State, rankTraces(t, s))
	}
}

func TestFaultStartIgnoredWhileFlushing(t *testing.T) {
	s, h := armed(t, Options{Seed: 1, ProfilerFlushDelay: 400 * time.Millisecond,
		ProfilerFaults: ProfilerFaults{StartWhileFlushing: StartWhileFlushingIgnore}})
	post(t, h, "/start_profile")
	s.Advance(time.Second)
	done := make(chan int)
	go func() { done <- post(t, h, "/stop_profile") }()
	waitState(t, s, "flushing")
	begun := time.Now()
	if code := post(t, h, "/start_profile"); code != 200 {
		t.Fatalf("start while flushing: %d", code)
	}
	if took := time.Since(begun); took > 200*time.Millisecond {
		t.Errorf("an ignored start took %v: it waited for the flush", took)
	}
	<-done
	st := s.Profiler()
	if st.State != "idle" || st.Starts != 1 || st.Violations[ViolationStartWhileFlushing] != 1 {
		t.Errorf("state %s, starts %d, violations %v: want idle, 1 start, start_while_flushing 1", st.State, st.Starts, st.Violations)
	}
	// Nothing records: the next stop finds the profiler idle.
	post(t, h, "/stop_profile")
	if st := s.Profiler(); st.State != "idle" || st.Violations[ViolationStopWhileIdle] != 1 {
		t.Errorf("the ignored start recorded something: %+v", st)
	}
}

func TestFaultLateFiles(t *testing.T) {
	s, h := armed(t, Options{Seed: 1, TensorParallel: 2, ProfilerFaults: ProfilerFaults{LateFiles: 300 * time.Millisecond}})
	post(t, h, "/start_profile")
	s.Advance(time.Second)
	if code := post(t, h, "/stop_profile"); code != 200 {
		t.Fatalf("stop: %d", code)
	}
	stopped := time.Now()
	st := s.Profiler()
	if st.State != "idle" || st.PendingWrites != 1 || len(rankTraces(t, s)) != 0 || st.FilesWritten != 0 {
		t.Fatalf("right after stop: state %s, pending %d, files %v", st.State, st.PendingWrites, rankTraces(t, s))
	}
	for deadline := time.Now().Add(5 * time.Second); s.Profiler().PendingWrites > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("late files never written")
		}
	}
	if took := time.Since(stopped); took < 250*time.Millisecond {
		t.Errorf("files written %v after the stop, want ~300ms", took)
	}
	st = s.Profiler()
	if len(rankTraces(t, s)) != 2 || st.FilesWritten != 5 {
		t.Errorf("after the delay: %v, files written %d (want 2 ranks + 2 tables + front end)", rankTraces(t, s), st.FilesWritten)
	}
	for _, f := range rankTraces(t, s) {
		if fi, err := os.Stat(f); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestFaultsEndpoint(t *testing.T) {
	s, h := armed(t, Options{})
	bad := map[string]string{
		"unknown field": `{"stop_hang": "1s", "explode": true}`,
		"bad duration":  `{"late_files": "soon"}`,
		"bad mode":      `{"start_while_flushing": "sometimes"}`,
		"negative":      `{"stop_hang": "-1s"}`,
		"not JSON":      `stop`,
	}
	for name, body := range bad {
		if code, resp := postJSON(t, h, "/admin/profiler/faults", body); code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", name, code, resp)
		}
	}
	code, _ := postJSON(t, h, "/admin/profiler/faults", `{"stop_hang": "2m", "start_while_flushing": "ignore", "late_files": "5s"}`)
	if code != 200 {
		t.Fatalf("set: %d", code)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/admin/profiler", nil))
	var st ProfilerStatus
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	want := ProfilerFaults{StopHang: 2 * time.Minute, StartWhileFlushing: StartWhileFlushingIgnore, LateFiles: 5 * time.Second}
	if st.Faults != want {
		t.Errorf("faults %+v, want %+v", st.Faults, want)
	}
	if s.Profiler().Faults != want {
		t.Errorf("Profiler() faults %+v", s.Profiler().Faults)
	}
	unarmed, _ := New(Options{})
	if code, _ := postJSON(t, unarmed.Handler(), "/admin/profiler/faults", `{}`); code != http.StatusConflict {
		t.Errorf("unarmed: %d, want 409", code)
	}
}

// TestSecondStopWaitsForTheFlush: a stop sent while a hung one still
// flushes (the sweeper's retry) is answered only once the flush is over,
// and is counted as a stop with nothing recording.
func TestSecondStopWaitsForTheFlush(t *testing.T) {
	s, h := armed(t, Options{Seed: 1, ProfilerFlushDelay: 400 * time.Millisecond})
	post(t, h, "/start_profile")
	s.Advance(time.Second)
	first := make(chan int)
	go func() { first <- post(t, h, "/stop_profile") }()
	waitState(t, s, "flushing")
	if code := post(t, h, "/stop_profile"); code != 200 {
		t.Fatalf("second stop: %d", code)
	}
	if st := s.Profiler(); st.State != "idle" {
		t.Errorf("the second stop was answered while the profiler was %s: want after the flush", st.State)
	}
	<-first
	if st := s.Profiler(); st.Stops != 1 || st.Violations[ViolationStopWhileIdle] != 1 {
		t.Errorf("stops %d, violations %v: want 1 stop and stop_while_idle 1", st.Stops, st.Violations)
	}
}
