package vllmsim

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// sglCall sends method path with body to h and returns the status and body.
func sglCall(t *testing.T, h http.Handler, method, path, body string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	var r *http.Request
	if body == "" {
		r = httptest.NewRequest(method, path, nil)
	} else {
		r = httptest.NewRequest(method, path, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
	}
	h.ServeHTTP(rec, r)
	return rec.Code, rec.Body.String()
}

func newSGLangSim(t *testing.T, o Options) *Sim {
	t.Helper()
	o.Engine = "sglang"
	if o.Seed == 0 {
		o.Seed = 7
	}
	if o.ProfilerLayers == 0 {
		o.ProfilerLayers = 4
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// sglangTraceName is SGLang's per-rank name: [{prefix}-]{profile_id}-TP-{tp}[-stage].trace.json.gz,
// profile_id Python's str(time.time()).
var sglangTraceName = regexp.MustCompile(`^(?:(.+)-)?(\d{10}\.\d+)-TP-(\d)(-EXTEND|-DECODE)?\.trace\.json\.gz$`)

// TestSGLangProfilerFrame: no arming, the body's output_dir, prefix and
// with_stack honoured, one file per rank with SGLang's name, SGLang's
// plain-text replies on GET and POST, and traces with kernels in them.
func TestSGLangProfilerFrame(t *testing.T) {
	t.Parallel()
	def, out := t.TempDir(), t.TempDir()
	s := newSGLangSim(t, Options{ProfilerDir: def, TensorParallel: 2, ProfilerExportRate: 1e9})
	h := s.Handler()
	s.Advance(time.Second)
	body := `{"output_dir": ` + strconv.Quote(out) + `, "activities": ["CPU", "GPU"], "profile_prefix": "ac-run1", "with_stack": false}`
	code, reply := sglCall(t, h, "POST", "/start_profile", body)
	if code != http.StatusOK || reply != "Start profiling.\n" {
		t.Fatalf("start: %d %q, want 200 %q", code, reply, "Start profiling.\n")
	}
	s.Advance(2 * time.Second)
	code, reply = sglCall(t, h, "GET", "/stop_profile", "")
	if code != http.StatusOK || reply != "Stop profiling. This will take some time.\n" {
		t.Fatalf("stop: %d %q", code, reply)
	}
	if left, _ := os.ReadDir(def); len(left) != 0 {
		t.Errorf("the default folder got files though output_dir was given: %v", left)
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	ranks := map[string]bool{}
	ids := map[string]bool{}
	for _, e := range entries {
		m := sglangTraceName.FindStringSubmatch(e.Name())
		if m == nil {
			t.Errorf("file %q does not have SGLang's name", e.Name())
			continue
		}
		if m[1] != "ac-run1" || m[4] != "" {
			t.Errorf("file %q: prefix %q stage %q, want ac-run1 and none", e.Name(), m[1], m[4])
		}
		ranks[m[3]], ids[m[2]] = true, true
		raw := gunzip(t, filepath.Join(out, e.Name()))
		if !bytes.Contains(raw, []byte(`"with_stack": 0`)) {
			t.Errorf("%s: with_stack false not in the header", e.Name())
		}
		if n := countKernels(readTrace(t, filepath.Join(out, e.Name()))); n == 0 {
			t.Errorf("%s: no kernels", e.Name())
		}
	}
	if len(ranks) != 2 || len(ids) != 1 {
		t.Errorf("ranks %v ids %v: want TP-0 and TP-1 of one profile id", ranks, ids)
	}
	st := s.Profiler()
	if st.Engine != "sglang" || st.Starts != 1 || st.Stops != 1 || st.State != "idle" || st.LastCapture.Kernels == 0 {
		t.Errorf("status %+v", st)
	}
}

// TestSGLangProfilerRefusals: a second start while recording and a stop
// with nothing recording are RuntimeErrors, a bare 500 with the message in
// the log and last_error; a bad body is a 400; the first recording goes on.
func TestSGLangProfilerRefusals(t *testing.T) {
	t.Parallel()
	s := newSGLangSim(t, Options{ProfilerDir: t.TempDir(), ProfilerExportRate: 1e9})
	h := s.Handler()
	code, body := sglCall(t, h, "POST", "/stop_profile", "")
	if code != http.StatusInternalServerError || body != "Internal Server Error" {
		t.Errorf("stop without start: %d %q, want 500 Internal Server Error", code, body)
	}
	if st := s.Profiler(); st.LastError != SGLangErrNotInProgress {
		t.Errorf("last error %q, want %q", st.LastError, SGLangErrNotInProgress)
	}
	if code, _ := sglCall(t, h, "POST", "/start_profile", `{"activities": ["TPU"]}`); code != http.StatusBadRequest {
		t.Errorf("unknown activity: %d, want 400", code)
	}
	if code, _ := sglCall(t, h, "POST", "/start_profile", ""); code != http.StatusOK {
		t.Fatalf("start: %d", code)
	}
	s.Advance(time.Second)
	code, body = sglCall(t, h, "POST", "/start_profile", "{}")
	if code != http.StatusInternalServerError || body != "Internal Server Error" {
		t.Errorf("second start: %d %q, want 500", code, body)
	}
	st := s.Profiler()
	if st.LastError != SGLangErrAlreadyInProgress || st.State != "recording" || st.Starts != 1 {
		t.Errorf("after a second start: %+v", st)
	}
	if st.Violations[ViolationStartWhileRecording] != 1 || st.Violations[ViolationStopWhileIdle] != 1 {
		t.Errorf("violations %v", st.Violations)
	}
	if code, _ := sglCall(t, h, "POST", "/stop_profile", ""); code != http.StatusOK {
		t.Errorf("stop of the first recording: %d", code)
	}
}

// TestSGLangProfilerNumStepsAutoStop: with num_steps the recording stops
// itself after that many forward passes and writes its files; a later stop
// finds nothing recording. On an idle server it never stops.
func TestSGLangProfilerNumStepsAutoStop(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := newSGLangSim(t, Options{ProfilerDir: dir, ProfilerExportRate: 1e9})
	h := s.Handler()
	s.Advance(time.Second)
	if code, _ := sglCall(t, h, "POST", "/start_profile", `{"num_steps": 5}`); code != http.StatusOK {
		t.Fatalf("start: %d", code)
	}
	s.Advance(2 * time.Second)
	waitState(t, s, "idle")
	st := s.Profiler()
	if st.FilesWritten != 1 || len(st.Stalls) != 1 || !st.Stalls[0].Auto {
		t.Fatalf("after num_steps: %+v", st)
	}
	evs := readTrace(t, st.Files[0])
	steps := 0
	for _, e := range evs {
		if e.Name == "execute_model" {
			steps++
		}
	}
	if steps != 5 {
		t.Errorf("the auto-stopped trace holds %d iterations, want num_steps 5", steps)
	}
	if code, _ := sglCall(t, h, "POST", "/stop_profile", ""); code != http.StatusInternalServerError {
		t.Errorf("stop after the auto-stop: %d, want 500 (not in progress)", code)
	}
	if got := s.Profiler().LastError; got != SGLangErrNotInProgress {
		t.Errorf("last error %q", got)
	}

	idle := newSGLangSim(t, Options{ProfilerDir: t.TempDir(), Load: NoLoad})
	sglCall(t, idle.Handler(), "POST", "/start_profile", `{"num_steps": 5}`)
	idle.Advance(5 * time.Second)
	if st := idle.Profiler(); st.State != "recording" || st.FilesWritten != 0 {
		t.Errorf("an idle server stopped on its own: %+v", st)
	}
}

// TestSGLangProfilerStopFreezesServing: the stop blocks for the slowest
// rank's bytes over the export rate; meanwhile no file has its final name
// and the engine serves nothing: every request that arrived during the
// freeze gets its first token after it, and the inter-token histogram
// shows the gap.
func TestSGLangProfilerStopFreezesServing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const rate = 150e3 // bytes/s: a stall of about a second for these traces
	s := newSGLangSim(t, Options{ProfilerDir: dir, TensorParallel: 2, ProfilerExportRate: rate})
	h := s.Handler()
	s.Advance(3 * time.Second)
	before := itlAbove(t, s, 0.5)
	sglCall(t, h, "POST", "/start_profile", "")
	s.Advance(2 * time.Second)
	stopped := make(chan int)
	begun := time.Now()
	go func() { c, _ := sglCall(t, h, "POST", "/stop_profile", ""); stopped <- c }()
	waitState(t, s, "flushing")
	named := func() int {
		n := 0
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if sglangTraceName.MatchString(e.Name()) {
				n++
			}
		}
		return n
	}
	if n := named(); n != 0 {
		t.Errorf("%d files under their final names while the export runs", n)
	}
	if code := <-stopped; code != http.StatusOK {
		t.Fatalf("stop: %d", code)
	}
	took := time.Since(begun)
	if n := named(); n != 2 {
		t.Errorf("%d rank files after the stop, want 2", n)
	}
	st := s.Profiler()
	if len(st.Stalls) != 1 {
		t.Fatalf("stalls %+v", st.Stalls)
	}
	stall := st.Stalls[0]
	var largest int64
	for _, f := range st.Files {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		largest = max(largest, fi.Size())
	}
	if stall.Bytes != largest {
		t.Errorf("stall priced on %d bytes, the largest rank file is %d", stall.Bytes, largest)
	}
	if want := time.Duration(float64(largest) / rate * float64(time.Second)); stall.Stall != want {
		t.Errorf("stall %v, want bytes/rate %v", stall.Stall, want)
	}
	if stall.Stall < 500*time.Millisecond {
		t.Fatalf("stall %v too short to see (traces of %d bytes): lower the rate", stall.Stall, largest)
	}
	if took < stall.Stall {
		t.Errorf("the stop answered after %v, before the export's %v", took, stall.Stall)
	}
	s.Advance(stall.Stall + 3*time.Second)
	freezeEnd := stall.At.Add(stall.Stall)
	arrived := 0
	for _, r := range s.Requests() {
		if r.Arrival.Before(stall.At) || !r.Arrival.Before(freezeEnd) || r.OutputTokens == 0 {
			continue
		}
		arrived++
		if first := r.Arrival.Add(time.Duration(r.TTFT * float64(time.Second))); first.Before(freezeEnd) {
			t.Errorf("request %s arrived at %v in the freeze and got its first token at %v, before its end %v",
				r.ID, r.Arrival, first, freezeEnd)
		}
	}
	if arrived == 0 {
		t.Error("no request arrived during the freeze: nothing shows it")
	}
	if after := itlAbove(t, s, 0.5); after <= before {
		t.Errorf("inter-token latencies above 0.5 s: %v before the stop, %v after: the freeze is not in the histogram", before, after)
	}
}

// itlAbove is the count of inter-token latencies above le seconds in the
// sim's /metrics (either engine's family name).
func itlAbove(t *testing.T, s *Sim, le float64) float64 {
	t.Helper()
	code, text := sglCall(t, s.Handler(), "GET", "/metrics", "")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"vllm:inter_token_latency_seconds", "sglang:inter_token_latency_seconds"} {
		f, ok := fams[name]
		if !ok {
			continue
		}
		total, below := 0.0, 0.0
		for _, m := range f.Metric {
			hg := m.GetHistogram()
			total += float64(hg.GetSampleCount())
			for _, b := range hg.Bucket {
				if b.GetUpperBound() == le {
					below += float64(b.GetCumulativeCount())
				}
			}
		}
		return total - below
	}
	t.Fatal("no inter-token latency histogram in /metrics")
	return 0
}
