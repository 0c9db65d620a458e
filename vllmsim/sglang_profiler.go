package vllmsim

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// SGLang's profiler, as its HTTP server exposes it (SGLANG.md §5): no arming
// (the routes always exist), a JSON body choosing the output folder on the
// server, step counts and activities, per-rank files named
// [{prefix}-]{profile_id}-TP-{tp}[-EXTEND|-DECODE].trace.json.gz, and a stop
// whose export runs on the scheduler thread, so serving freezes until the
// files are written (issue #34942: ~25 s for 242 MB at TP8).

// SGLang's RuntimeError texts (scheduler_profiler_mixin.py, SGLANG.md §5 [S5]).
const (
	SGLangErrAlreadyInProgress = "Profiling is already in progress. Call /stop_profile first."
	SGLangErrNotInProgress     = "Profiling is not in progress. Call /start_profile first."
)

// SGLang's plain-text replies (http_server.py).
const (
	sglangStartReply = "Start profiling.\n"
	sglangStopReply  = "Stop profiling. This will take some time.\n"
)

// DefaultSGLangExportRate is the bytes per second one rank's export runs at:
// issue #34942 saw 242 MB written by 8 ranks in ~25 s, ~1.2 MB/s each, the
// ranks exporting side by side and the TP barrier waiting for the slowest.
const DefaultSGLangExportRate = 1.2e6

// sglangActivities are the values ProfileReqInput.activities takes.
var sglangActivities = map[string]bool{"CPU": true, "GPU": true, "MEM": true, "CUDA_PROFILER": true, "RPD": true, "XPU": true}

// sglang says whether the sim is an SGLang server.
func (o Options) sglang() bool { return o.Engine == "sglang" }

// sglangReq is ProfileReqInput: every field optional (null or absent).
type sglangReq struct {
	OutputDir      *string  `json:"output_dir"`
	StartStep      *int     `json:"start_step"`
	NumSteps       *int     `json:"num_steps"`
	Activities     []string `json:"activities"`
	WithStack      *bool    `json:"with_stack"`
	RecordShapes   *bool    `json:"record_shapes"`
	ProfileByStage bool     `json:"profile_by_stage"`
	MergeProfiles  bool     `json:"merge_profiles"`
	ProfilePrefix  *string  `json:"profile_prefix"`
	ProfileStages  []string `json:"profile_stages"`
	ProfileID      *string  `json:"profile_id"`
}

// check is pydantic's validation of the body: a bad one is a 400.
func (r sglangReq) check() error {
	for _, a := range r.Activities {
		if !sglangActivities[a] {
			return fmt.Errorf("activities: %q is not one of CPU, GPU, MEM, CUDA_PROFILER, RPD, XPU", a)
		}
	}
	switch {
	case r.NumSteps != nil && *r.NumSteps < 0:
		return fmt.Errorf("num_steps %d: want >= 0", *r.NumSteps)
	case r.StartStep != nil && *r.StartStep < 0:
		return fmt.Errorf("start_step %d: want >= 0", *r.StartStep)
	}
	return nil
}

// sglangCapture is one accepted start: where and how its files are written.
type sglangCapture struct {
	dir, prefix, id string
	traces          bool // CPU or GPU among the activities: Chrome traces are written
	stack, shapes   bool
	byStage         bool
	startAt         int // the forward pass the recording begins at
	numSteps        int // forward passes recorded before it stops itself; 0: until /stop_profile
}

// ProfilerStall is one freeze of serving by a profiler export.
type ProfilerStall struct {
	At    time.Time     `json:"at"`    // when the scheduler thread stopped serving (simulated clock)
	Stall time.Duration `json:"stall"` // how long it served nothing
	Bytes int64         `json:"bytes"` // the largest rank's trace, which the barrier waited for
	Auto  bool          `json:"auto"`  // the num_steps auto-stop's, not /stop_profile's
}

// sglangProfiler is SGLang's torch profiler on the simulated server.
type sglangProfiler struct {
	sim  *Sim
	opts Options

	mu         sync.Mutex
	state      profilerState
	cap        sglangCapture
	pending    bool // accepted, waiting for start_step
	forward    int  // forward passes run since the server started
	counted    int  // forward passes recorded
	recStart   time.Time
	overlong   bool
	steps      []profiledStep
	exportDone chan struct{}
	starts     int
	stops      int
	files      []string
	violations map[string]int
	lastErr    string
	last       CaptureTruth
	stalls     []ProfilerStall
}

func newSGLangProfiler(s *Sim) *sglangProfiler {
	return &sglangProfiler{sim: s, opts: s.opts, violations: map[string]int{
		ViolationStartWhileRecording: 0, ViolationStopWhileIdle: 0,
		ViolationRecordingPastLimit: 0, ViolationStartWhileFlushing: 0,
	}}
}

// fail records a RuntimeError the way SGLang's server shows it: in its log
// (the HTTP caller only sees a 500).
func (p *sglangProfiler) fail(msg string) error {
	p.lastErr = msg
	p.opts.Logger.Warn("RuntimeError: "+msg, zap.String("engine", "sglang"))
	return sglangError(msg)
}

// sglangError is a RuntimeError raised by the tokenizer manager.
type sglangError string

func (e sglangError) Error() string { return string(e) }

// start accepts a ProfileReqInput. A start while recording is refused (the
// newest code checks it, SGLANG.md §5); one while an export runs waits for
// it, as the scheduler thread answers nothing meanwhile.
func (p *sglangProfiler) start(req sglangReq, cancelled <-chan struct{}) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.state == profFlushing {
		p.violations[ViolationStartWhileFlushing]++
		done := p.exportDone
		p.mu.Unlock()
		select {
		case <-done:
		case <-cancelled:
			p.mu.Lock()
			return nil
		}
		p.mu.Lock()
	}
	if p.state == profRecording || p.pending {
		p.violations[ViolationStartWhileRecording]++
		return p.fail(SGLangErrAlreadyInProgress)
	}
	c := sglangCapture{dir: p.opts.ProfilerDir, traces: len(req.Activities) == 0, stack: true, shapes: true, byStage: req.ProfileByStage}
	if c.dir == "" {
		c.dir = os.TempDir()
	}
	if req.OutputDir != nil && *req.OutputDir != "" {
		c.dir = *req.OutputDir
	}
	if req.ProfilePrefix != nil {
		c.prefix = *req.ProfilePrefix
	}
	c.id = pyTime(p.sim.Now())
	if req.ProfileID != nil && *req.ProfileID != "" {
		c.id = *req.ProfileID
	}
	for _, a := range req.Activities {
		c.traces = c.traces || a == "CPU" || a == "GPU"
	}
	if req.WithStack != nil {
		c.stack = *req.WithStack
	}
	if req.RecordShapes != nil {
		c.shapes = *req.RecordShapes
	}
	c.startAt = p.forward
	if req.StartStep != nil {
		c.startAt = max(*req.StartStep, p.forward+1)
	}
	if req.NumSteps != nil {
		c.numSteps = *req.NumSteps
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return p.fail(fmt.Sprintf("output_dir %s: %v", c.dir, err))
	}
	p.starts++
	p.cap = c
	p.steps = nil
	p.pending = c.startAt > p.forward
	if !p.pending {
		p.begin()
	}
	return nil
}

// begin starts recording. Callers hold mu.
func (p *sglangProfiler) begin() {
	p.pending = false
	p.state = profRecording
	p.counted = 0
	p.overlong = false
	p.recStart = p.sim.Now()
}

// pyTime is Python's str(time.time()) for t: seconds with the shortest
// digits that read back the same float (e.g. 1728625868.5155685).
func pyTime(t time.Time) string {
	s := strconv.FormatFloat(float64(t.UnixNano())/1e9, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}

// stop ends the recording: the scheduler thread exports every rank's trace
// and serving freezes until the slowest rank's export is over; the files
// are complete when it returns. A stop with nothing recording is SGLang's
// "not in progress" error; a stop while an export runs waits for it, then
// finds nothing recording.
func (p *sglangProfiler) stop() error {
	at, export, err := p.takeStop()
	if !export {
		return err
	}
	return p.export(at, false)
}

// takeStop decides a stop under the locks: export says whether a recording
// was frozen for export at at.
func (p *sglangProfiler) takeStop() (at time.Duration, export bool, err error) {
	p.sim.mu.Lock()
	p.mu.Lock()
	for p.state == profFlushing {
		done := p.exportDone
		p.mu.Unlock()
		p.sim.mu.Unlock()
		<-done
		p.sim.mu.Lock()
		p.mu.Lock()
	}
	defer p.sim.mu.Unlock()
	defer p.mu.Unlock()
	switch {
	case p.state != profRecording && !p.pending:
		p.violations[ViolationStopWhileIdle]++
		return 0, false, p.fail(SGLangErrNotInProgress)
	case p.pending: // start_step not reached: nothing recorded, nothing written
		p.pending = false
		p.stops++
		return 0, false, nil
	}
	return p.freeze(), true, nil
}

// freeze stops the scheduler thread at the end of the iteration in flight,
// for as long as the export will take (not known yet: until release), and
// takes the recording for export. Callers hold the sim's mu and p.mu.
func (p *sglangProfiler) freeze() time.Duration {
	e := p.sim.eng
	at := p.sim.engineNow()
	if e.inflight {
		at = max(at, e.stepEnd)
	}
	e.holdUntil = math.MaxInt64
	if e.inflight && len(p.steps) < maxProfiledSteps {
		// Its kernels were launched while recording: the trace holds them.
		p.steps = append(p.steps, profiledStep{start: p.sim.wall(e.stepStart), rec: stepRecord{
			start: e.stepStart, end: e.stepEnd, work: e.work, cost: e.cost, running: len(e.running), waiting: len(e.waiting),
		}})
	}
	p.stops++
	p.state = profFlushing
	p.exportDone = make(chan struct{})
	return at
}

// export writes the recording's files under temporary names, holds serving
// for the slowest rank's size over the export rate, measured from the
// freeze, then gives the files their names and releases serving: they are
// whole when the stop answers (after the TP barrier).
func (p *sglangProfiler) export(at time.Duration, auto bool) error {
	begun := time.Now()
	p.mu.Lock()
	c, steps, recStart := p.cap, p.steps, p.recStart
	p.steps = nil
	p.mu.Unlock()
	ended := p.sim.wall(at)
	ex := writeSGLangProfile(p.opts, c, recStart, ended, steps)
	stall := time.Duration(float64(ex.largest) / p.opts.ProfilerExportRate * float64(time.Second))
	p.sim.mu.Lock()
	p.sim.eng.hold(at + stall)
	p.sim.mu.Unlock()
	if wait := stall - time.Since(begun); wait > 0 {
		time.Sleep(wait)
	}
	files, err := ex.publish()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.files = append(p.files, files...)
	p.last = ex.truth
	p.stalls = append(p.stalls, ProfilerStall{At: p.sim.wall(at), Stall: stall, Bytes: ex.largest, Auto: auto})
	if err != nil {
		p.lastErr = err.Error()
	}
	p.state = profIdle
	close(p.exportDone)
	return err
}

// sglangExport is one stop's files, written under temporary names.
type sglangExport struct {
	tmp, final []string
	largest    int64 // the largest rank's bytes
	truth      CaptureTruth
	err        error
}

// publish renames the files to their final names and returns them.
func (ex *sglangExport) publish() ([]string, error) {
	var out []string
	err := ex.err
	for i, tmp := range ex.tmp {
		if e := os.Rename(tmp, ex.final[i]); e != nil {
			err = cmpErr(err, e)
			continue
		}
		out = append(out, ex.final[i])
	}
	return out, err
}

// writeSGLangProfile writes one trace per rank into c.dir (per stage with
// profile_by_stage), each under a temporary name beside its SGLang name.
func writeSGLangProfile(opts Options, c sglangCapture, begun, ended time.Time, steps []profiledStep) *sglangExport {
	ex := &sglangExport{}
	if !c.traces {
		return ex // MEM or CUDA_PROFILER alone: no Chrome trace
	}
	type part struct {
		suffix string
		steps  []profiledStep
	}
	parts := []part{{"", steps}}
	if c.byStage {
		var extend, decode []profiledStep
		for _, ps := range steps {
			if ps.rec.work.prefillTokens > 0 {
				extend = append(extend, ps)
			} else {
				decode = append(decode, ps)
			}
		}
		parts = []part{{"-EXTEND", extend}, {"-DECODE", decode}}
	}
	prefix := ""
	if c.prefix != "" {
		prefix = c.prefix + "-"
	}
	for rank := range opts.TensorParallel {
		var size int64
		for _, pt := range parts {
			name := fmt.Sprintf("%s%s-TP-%d%s.trace.json.gz", prefix, c.id, rank, pt.suffix)
			tmp := filepath.Join(c.dir, "."+name+".tmp")
			fl := rankFlavor{process: fmt.Sprintf("TP%d", rank), traceName: name, stack: b2i(c.stack), shapes: b2i(c.shapes)}
			_, written, err := rankTrace(tmp, opts, rank, begun, ended, pt.steps, fl)
			ex.truth.add(written)
			if err != nil {
				ex.err = cmpErr(ex.err, err)
				continue
			}
			if fi, err := os.Stat(tmp); err == nil {
				size += fi.Size()
			}
			ex.tmp = append(ex.tmp, tmp)
			ex.final = append(ex.final, filepath.Join(c.dir, name))
		}
		ex.largest = max(ex.largest, size)
	}
	return ex
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// record keeps a forward pass: it counts toward start_step and num_steps,
// and the one that reaches num_steps stops the recording on the scheduler
// thread (the same export and freeze as a stop). Called under the sim's mu.
func (p *sglangProfiler) record(start time.Time, st *stepRecord) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.forward++
	if p.pending && p.forward >= p.cap.startAt {
		p.begin()
	}
	// The iteration in flight when the start arrived is not the
	// recording's: SGLang starts it between two iterations.
	if p.state != profRecording || start.Before(p.recStart) {
		return
	}
	p.counted++
	if len(p.steps) < maxProfiledSteps {
		p.steps = append(p.steps, profiledStep{start: start, rec: *st})
	}
	if p.cap.numSteps > 0 && p.counted >= p.cap.numSteps {
		at := p.freeze()
		go func() { _ = p.export(at, true) }()
	}
}

// recordRequest: SGLang writes no front-end trace.
func (p *sglangProfiler) recordRequest(FinishedRequest) {}

// check counts a recording that ran past the limit, once per recording.
func (p *sglangProfiler) check() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == profRecording && !p.overlong && p.sim.Now().Sub(p.recStart) > p.opts.ProfilerMaxRecording {
		p.overlong = true
		p.violations[ViolationRecordingPastLimit]++
	}
}

// status reports the profiler's counters.
func (p *sglangProfiler) status() ProfilerStatus {
	p.check()
	p.mu.Lock()
	defer p.mu.Unlock()
	v := make(map[string]int, len(p.violations))
	for k, n := range p.violations {
		v[k] = n
	}
	state := p.state.String()
	if p.pending {
		state = "pending"
	}
	return ProfilerStatus{Engine: "sglang", Armed: true, State: state, Starts: p.starts, Stops: p.stops,
		FilesWritten: len(p.files), Files: append([]string{}, p.files...), Violations: v, LastError: p.lastErr,
		LastCapture: p.last, Stalls: append([]ProfilerStall{}, p.stalls...)}
}
