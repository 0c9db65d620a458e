package vllmsim

import (
	"encoding/json"
	"net/http"
	"os"
	"sync"
	"time"
)

// Profiler protocol violations, counted by kind in GET /admin/profiler.
const (
	ViolationStartWhileRecording = "start_while_recording"
	ViolationStopWhileIdle       = "stop_while_idle"
	ViolationRecordingPastLimit  = "recording_past_limit"
	ViolationStartWhileFlushing  = "start_while_flushing"
)

const maxProfiledSteps = 200_000

type profilerState int

const (
	profIdle profilerState = iota
	profRecording
	profFlushing
)

func (p profilerState) String() string {
	return [...]string{"idle", "recording", "flushing"}[p]
}

// ProfilerStatus is what GET /admin/profiler reports: how the profiler was
// driven, what it wrote, and every breach of vLLM's protocol by kind.
type ProfilerStatus struct {
	// Engine is the profiler's dialect: "" for vLLM's, "sglang" for SGLang's.
	Engine       string         `json:"engine,omitempty"`
	Armed        bool           `json:"armed"`
	State        string         `json:"state"`
	Starts       int            `json:"starts"`
	Stops        int            `json:"stops"`
	FilesWritten int            `json:"files_written"`
	Files        []string       `json:"files"`
	Violations   map[string]int `json:"violations"`
	LastError    string         `json:"last_error,omitempty"`
	// PendingWrites counts stops whose files are still to be written (the
	// late_files fault).
	PendingWrites int            `json:"pending_writes"`
	Faults        ProfilerFaults `json:"faults"`
	// LastCapture is what the last stop's rank traces hold, summed over the
	// ranks, from the simulator's own bookkeeping (not read back from the
	// files): the truth a capture's analysis is held to.
	LastCapture CaptureTruth `json:"last_capture"`
	// Stalls are the freezes of serving the exports caused, oldest first
	// (SGLang's stop exports on the scheduler thread).
	Stalls []ProfilerStall `json:"stalls,omitempty"`
}

// CaptureTruth is the GPU work one capture's rank traces hold.
type CaptureTruth struct {
	Kernels int     `json:"kernels"` // kernels and copies written
	GPUus   float64 `json:"gpu_us"`  // their summed duration
	GEMMus  float64 `json:"gemm_us"` // the part that is the cost model's GEMMs
	// Graphed are the kernels replayed from a cudaGraphLaunch in the file
	// (its correlation, no External id); PreFrame those launched before the
	// recording, whose launch rows are not in the file.
	Graphed  int `json:"graph_kernels"`
	PreFrame int `json:"preframe_kernels"`
}

func (c *CaptureTruth) add(o CaptureTruth) {
	c.Kernels += o.Kernels
	c.GPUus += o.GPUus
	c.GEMMus += o.GEMMus
	c.Graphed += o.Graphed
	c.PreFrame += o.PreFrame
}

// GEMMShare is the GEMM share of the GPU time written (0 without any).
func (c CaptureTruth) GEMMShare() float64 {
	if c.GPUus <= 0 {
		return 0
	}
	return c.GEMMus / c.GPUus
}

// profiledStep is one engine iteration seen while recording.
type profiledStep struct {
	start time.Time
	rec   stepRecord
}

// profiler is vLLM's torch profiler as the API server exposes it: armed at
// start, recording between /start_profile and /stop_profile, and a stop that
// blocks while the trace files are flushed.
type profiler struct {
	opts Options
	now  func() time.Time // the simulated clock

	mu         sync.Mutex
	state      profilerState
	recStart   time.Time
	overlong   bool
	steps      []profiledStep
	reqs       []FinishedRequest
	flushDone  chan struct{}
	starts     int
	stops      int
	files      []string
	violations map[string]int
	lastErr    string
	last       CaptureTruth
	faults     ProfilerFaults
	pending    int // stops whose files are not written yet
	// freeze stalls the engine until the returned release: vLLM's flush
	// runs on the worker's main thread, so no iteration runs while a stop
	// blocks (PROFILES.md: PR #51816 moves the export off it). nil: no stall.
	freeze func() (release func(modeled time.Duration))
}

func newProfiler(o Options, now func() time.Time) *profiler {
	return &profiler{opts: o, now: now, faults: o.ProfilerFaults, violations: map[string]int{
		ViolationStartWhileRecording: 0, ViolationStopWhileIdle: 0,
		ViolationRecordingPastLimit: 0, ViolationStartWhileFlushing: 0,
	}}
}

// start begins recording. A start while recording is counted and ignored,
// as vLLM's workers ignore it; a start while a stop is flushing is counted
// and takes effect once the flush is over (the engine is busy until then),
// or, with the start_while_flushing fault "ignore", is dropped.
func (p *profiler) start(r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch p.state {
	case profRecording:
		p.violations[ViolationStartWhileRecording]++
		return
	case profFlushing:
		p.violations[ViolationStartWhileFlushing]++
		if p.faults.StartWhileFlushing == StartWhileFlushingIgnore {
			return
		}
		for p.state == profFlushing {
			done := p.flushDone
			p.mu.Unlock()
			select {
			case <-done:
			case <-r.Context().Done():
				p.mu.Lock()
				return
			}
			p.mu.Lock()
		}
		if p.state != profIdle {
			return
		}
	}
	p.starts++
	p.state = profRecording
	p.recStart = p.now()
	p.overlong = false
	p.steps, p.reqs = nil, nil
}

// stop ends a recording: it blocks for the flush delay (plus the stop_hang
// fault), serving nothing meanwhile, then writes the trace files, or with the late_files fault returns
// and writes them that much later. It runs to the end even if the caller
// goes away, as vLLM's flush does. A stop with nothing recording is counted
// and answered. inflight, when set, is the iteration running at the stop:
// its kernels were launched while recording, so the trace holds them too.
func (p *profiler) stop(inflight *profiledStep) error {
	p.mu.Lock()
	if p.state == profFlushing {
		// The engine handles one profiler call at a time: a second stop
		// (a retry of one that hung) is answered once the flush is over,
		// never while it runs, and is still a stop with nothing recording.
		p.violations[ViolationStopWhileIdle]++
		done := p.flushDone
		p.mu.Unlock()
		<-done
		return nil
	}
	if p.state != profRecording {
		p.violations[ViolationStopWhileIdle]++
		p.mu.Unlock()
		return nil
	}
	p.check1()
	p.stops++
	p.state = profFlushing
	p.flushDone = make(chan struct{})
	steps, reqs, begun := p.steps, p.reqs, p.recStart
	if inflight != nil {
		steps = append(steps, *inflight)
	}
	p.steps, p.reqs = nil, nil
	faults := p.faults
	ended := p.now()
	p.mu.Unlock()

	blocked := faults.StopHang + p.opts.ProfilerFlushDelay
	release := func(time.Duration) {}
	if p.freeze != nil {
		release = p.freeze()
	}
	time.Sleep(blocked)
	if faults.LateFiles > 0 {
		release(blocked) // the export runs off the engine's thread
		p.mu.Lock()
		p.pending++
		p.state = profIdle
		close(p.flushDone)
		p.mu.Unlock()
		go func() {
			time.Sleep(faults.LateFiles)
			p.wrote(writeProfile(p.opts, begun, ended, steps, reqs))
		}()
		return nil
	}
	files, truth, err := writeProfile(p.opts, begun, ended, steps, reqs)
	release(blocked)
	p.mu.Lock()
	p.pending++
	p.state = profIdle
	close(p.flushDone)
	p.mu.Unlock()
	p.wrote(files, truth, err)
	return err
}

// wrote records the files of a stop.
func (p *profiler) wrote(files []string, truth CaptureTruth, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.files = append(p.files, files...)
	p.last = truth
	if err != nil {
		p.lastErr = err.Error()
	}
	p.pending--
}

// record keeps an iteration while recording.
func (p *profiler) record(start time.Time, st *stepRecord) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == profRecording && len(p.steps) < maxProfiledSteps {
		p.steps = append(p.steps, profiledStep{start: start, rec: *st})
	}
}

// recordRequest keeps a finished request for the front end's trace.
func (p *profiler) recordRequest(f FinishedRequest) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == profRecording && len(p.reqs) < maxProfiledSteps {
		p.reqs = append(p.reqs, f)
	}
}

// check counts a recording that ran past the limit, once per recording.
func (p *profiler) check() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.check1()
}

func (p *profiler) check1() {
	if p.state == profRecording && !p.overlong && p.now().Sub(p.recStart) > p.opts.ProfilerMaxRecording {
		p.overlong = true
		p.violations[ViolationRecordingPastLimit]++
	}
}

// status reports the profiler's counters.
func (p *profiler) status() ProfilerStatus {
	p.check()
	p.mu.Lock()
	defer p.mu.Unlock()
	v := make(map[string]int, len(p.violations))
	for k, n := range p.violations {
		v[k] = n
	}
	return ProfilerStatus{
		Armed: true, State: p.state.String(), Starts: p.starts, Stops: p.stops,
		FilesWritten: len(p.files), Files: append([]string{}, p.files...), Violations: v, LastError: p.lastErr,
		PendingWrites: p.pending, Faults: p.faults, LastCapture: p.last,
	}
}

// Profiler reports the profiler's status; unarmed, only Armed=false.
func (s *Sim) Profiler() ProfilerStatus {
	if s.prof == nil {
		return ProfilerStatus{State: "unarmed", Violations: map[string]int{}}
	}
	return s.prof.status()
}

// profilerRoutes registers /start_profile and /stop_profile: only when armed,
// so an unarmed sim answers 404 as vLLM does.
func (s *Sim) profilerRoutes(mux *http.ServeMux) {
	if sg, ok := s.prof.(*sglangProfiler); ok {
		s.sglangProfilerRoutes(mux, sg)
		return
	}
	prof, ok := s.prof.(*profiler)
	if !ok {
		return
	}
	if err := os.MkdirAll(s.opts.ProfilerDir, 0o755); err != nil {
		s.opts.Logger.Warn("Profiler directory could not be created.")
	}
	mux.HandleFunc("POST /start_profile", func(w http.ResponseWriter, r *http.Request) {
		prof.start(r)
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("POST /stop_profile", func(w http.ResponseWriter, r *http.Request) {
		if err := prof.stop(s.inflight()); err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
			return
		}
		w.WriteHeader(http.StatusOK)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// inflight is the engine's iteration in flight, if any.
func (s *Sim) inflight() *profiledStep {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.eng
	if !e.inflight {
		return nil
	}
	return &profiledStep{start: s.wall(e.stepStart), rec: stepRecord{
		start: e.stepStart, end: e.stepEnd, work: e.work, cost: e.cost,
		running: len(e.running), waiting: len(e.waiting),
	}}
}
