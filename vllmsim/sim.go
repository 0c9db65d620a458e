// Package vllmsim is a stand-in for a vLLM server, for tests and the demo:
// its /metrics, llm_request spans, profiler endpoints and OpenAI API follow
// vLLM's real surface, and the symptoms they show come out of a small model
// of the engine (scheduler, KV block pool, chunked prefill, preemption,
// client timeouts) driven by a clock — real time with Run, virtual time with
// Advance. Scenarios inject the causes the triage verdicts name. With
// Options.Engine set to EngineSGLang the same engine shows SGLang's surface
// instead (sglang.go): its /metrics in one of three eras and its spans.
package vllmsim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Sim is one simulated vLLM server. Its methods are safe for concurrent use.
type Sim struct {
	opts    Options
	metrics *metrics
	sgl     *sglangMetrics // SGLang's surface instead of vLLM's (Options.Engine)
	spans   *spanEmitter
	prof    profilerEngine // nil: vLLM's, unarmed
	handler http.Handler

	mu           sync.Mutex
	eng          *engine
	load         *loadGen
	scenario     Scenario
	shape        *Shape        // laid over the scenario's load, if set
	since        time.Duration // when scenario and shape took effect
	previous     string        // the scenario before the last change
	pending      *pendingShift // the next scheduled change, if any
	loadOverride float64
	concOverride int
	history      *finishedLog
	running      bool // Run is driving the clock
	gpuFaults    []armedFault
	busy         busyLog
	dcgm         *dcgmState

	clock atomic.Int64 // eng.now, readable without mu (the profiler's clock)
}

// New builds a Sim from opts (defaults applied); nothing runs until Run or
// Advance moves its clock.
func New(opts Options) (*Sim, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("vllmsim: %w", err)
	}
	rng := rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))
	s := &Sim{
		opts:         o,
		metrics:      newMetrics(o.Model, o.LegacyMetrics, o.EngineConfig),
		loadOverride: o.Load,
		concOverride: o.Concurrency,
		history:      newFinishedLog(o.MaxFinished),
		load:         newLoadGen(rng),
	}
	// Trace ids also depend on the start time: two sims with the same seed
	// (replicas, a test's scenarios) must not share ids in one backend.
	idSeed := uint64(o.Start.UnixNano())
	s.spans, err = newSpanEmitter(o, rand.New(rand.NewPCG(o.Seed+1, idSeed^0x5851f42d4c957f2d)))
	if err != nil {
		return nil, fmt.Errorf("vllmsim: traces: %w", err)
	}
	s.eng = newEngine(o.EngineConfig, s)
	s.eng.gpuSlowdown = s.gpuSlowdownAt
	s.dcgm = newDCGMState(o)
	if err := s.SetGPUFaults(o.GPUFaults); err != nil {
		return nil, err
	}
	s.prof = s.newProfilerEngine()
	first := o.Scenario
	if o.ShiftAfter > 0 {
		first = ScenarioHealthy
	}
	if o.Engine == EngineSGLang {
		s.sgl = newSGLangMetrics(o)
	}
	if err := s.SetScenario(first); err != nil {
		return nil, err
	}
	if s.sgl != nil {
		s.sgl.log(s.eng, 0) // a fresh server shows its scheduler gauges (SGLANG.md §1)
		if !o.sglangTraces() && (o.OTLPEndpoint != "" || o.SpanExporter != nil) {
			o.Logger.Info("This SGLang era predates tracing: no spans are exported.", zap.String("sglang_era", o.SGLangEra))
		}
	}
	if o.ShiftAfter > 0 {
		if err := s.Shift(o.Scenario, o.ShiftAfter); err != nil {
			return nil, err
		}
	}
	s.handler = s.routes()
	return s, nil
}

// Handler serves every route: /metrics, /health, /version, /v1/models,
// /v1/completions, /v1/chat/completions, the profiler's (when armed) and
// /admin/{scenario,requests,profiler}.
func (s *Sim) Handler() http.Handler { return s.handler }

// DCGMHandler serves an NVIDIA DCGM exporter's /metrics for the node under
// this instance: one GPU per tensor-parallel rank, its values following the
// engine and the injected GPU faults (see dcgm.go and Options.DCGM).
func (s *Sim) DCGMHandler() http.Handler { return s.dcgmHandler() }

// Run drives the engine and the load generator in real time, one engine
// advance every StepInterval, until ctx ends; then it flushes the spans.
func (s *Sim) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.running {
		s.mu.Unlock()
		return errors.New("vllmsim: Run called twice")
	}
	s.running = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.running = false
		s.mu.Unlock()
	}()
	tick := time.NewTicker(s.opts.StepInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			return s.spans.flush(flushCtx)
		case <-tick.C:
			s.mu.Lock()
			if target := time.Since(s.opts.Start); target > s.eng.now {
				s.advanceTo(target)
			}
			s.mu.Unlock()
			if s.prof != nil {
				s.prof.check()
			}
		}
	}
}

// Advance moves the simulated clock forward by d, running every arrival and
// engine step that falls inside it. Tests use it for virtual time; do not
// mix it with Run.
func (s *Sim) Advance(d time.Duration) {
	s.mu.Lock()
	s.advanceTo(s.eng.now + d)
	s.mu.Unlock()
	if s.prof != nil {
		s.prof.check()
	}
}

// advanceTo processes events, in time order, up to target. Callers hold mu.
func (s *Sim) advanceTo(target time.Duration) {
	for {
		next, isArrival := time.Duration(-1), false
		if s.eng.inflight {
			next = s.eng.stepEnd
		} else if s.eng.holdUntil > s.eng.now && s.eng.holdUntil <= target && s.eng.hasWork() {
			next = s.eng.holdUntil // the stall ends: the scheduler resumes
		}
		if at, ok := s.load.next(); ok && (next < 0 || at < next) {
			next, isArrival = at, true
		}
		// A shift lands before an arrival or step end at the same instant:
		// what arrives from then on is the new traffic.
		if p := s.pending; p != nil && p.at <= target && (next < 0 || p.at <= next) {
			s.eng.now = max(s.eng.now, p.at)
			s.applyPending()
			continue
		}
		if next < 0 || next > target {
			break
		}
		s.eng.now = max(s.eng.now, next)
		if isArrival {
			s.eng.add(s.load.pop())
			continue
		}
		if s.eng.inflight {
			s.eng.completeStep()
		}
		s.eng.startStep()
	}
	s.eng.now = target
	s.clock.Store(int64(target))
	if s.sgl != nil {
		s.sgl.idle(s.eng, target)
	}
}

// Now is the simulated clock as wall time: Options.Start plus the time run.
func (s *Sim) Now() time.Time {
	return s.wall(time.Duration(s.clock.Load()))
}

func (s *Sim) wall(d time.Duration) time.Time { return s.opts.Start.Add(d) }

// setLoad changes the load overrides (see Options.Load and Concurrency)
// and restarts the generator with them.
func (s *Sim) setLoad(rps *float64, concurrency *int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rps != nil {
		s.loadOverride = *rps
	}
	if concurrency != nil {
		s.concOverride = *concurrency
	}
	s.load.reset(s.effectiveLoad(), s.eng.now)
}

// effectiveLoad is the traffic now: the scenario's load with the overrides
// and the shape applied.
func (s *Sim) effectiveLoad() LoadSpec { return s.loadFor(s.scenario, s.shape) }

// loadFor is sc's load with the overrides (Options.Load and Concurrency,
// POST load/concurrency) applied, then shape laid over it: a shape's fields
// win over the overrides.
func (s *Sim) loadFor(sc Scenario, shape *Shape) LoadSpec {
	l := sc.Load
	switch {
	case s.loadOverride == NoLoad:
		l.RPS, l.Concurrency = 0, 0
	case s.loadOverride > 0:
		l.RPS = s.loadOverride
	}
	if s.concOverride > 0 && s.loadOverride != NoLoad {
		l.Concurrency = s.concOverride
	}
	if shape != nil {
		l = shape.apply(l)
	}
	if w := s.opts.LoadScale; w > 0 && w != 1 {
		l.RPS *= w
		l.Concurrency = int(math.Round(float64(l.Concurrency) * w))
	}
	return l
}

// Requests returns the finished requests kept (the last MaxFinished),
// oldest first.
func (s *Sim) Requests() []FinishedRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.history.all()
}

// State is the engine's instantaneous state, as its gauges show it.
type State struct {
	Time time.Time `json:"time"`
	// Engine is the serving engine the sim presents (EngineVLLM or
	// EngineSGLang), SGLangEra its SGLang metric generation.
	Engine      string   `json:"engine"`
	SGLangEra   string   `json:"sglang_era,omitempty"`
	Scenario    string   `json:"scenario"`
	Running     int      `json:"running"`
	Waiting     int      `json:"waiting"`
	KVUsage     float64  `json:"kv_usage"`
	MaxNumSeqs  int      `json:"max_num_seqs"`
	NumBlocks   int      `json:"num_gpu_blocks"`
	Load        LoadSpec `json:"load"`
	Description string   `json:"description"`
	// Since is when the scenario (and shape) took effect: the start, or the
	// last switch or shift.
	Since time.Time `json:"since"`
	// Previous is the scenario before that change ("" before any).
	Previous string `json:"previous,omitempty"`
	// Shape is the traffic shape laid over the scenario's load, if any.
	Shape *Shape `json:"shape,omitempty"`
	// Pending is the shift scheduled next, if any.
	Pending *PendingShift `json:"pending,omitempty"`
}

// State reports the engine's state now.
func (s *Sim) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return State{
		Time: s.wall(s.eng.now), Engine: s.opts.Engine, SGLangEra: s.opts.SGLangEra,
		Scenario: s.scenario.Name, Description: s.scenario.Description,
		Running: len(s.eng.running), Waiting: len(s.eng.waiting), KVUsage: s.eng.kvUsage(),
		MaxNumSeqs: s.eng.cfg.MaxNumSeqs, NumBlocks: s.eng.cfg.NumGPUBlocks, Load: s.effectiveLoad(),
		Since: s.wall(s.since), Previous: s.previous, Shape: cloneShape(s.shape), Pending: s.pendingReport(),
	}
}

// Close flushes and stops the span exporter; the Sim must not be used after.
func (s *Sim) Close(ctx context.Context) error {
	return s.spans.shutdown(ctx)
}
