package vllmsim

import (
	"slices"
	"time"
)

// Finish reasons, as request_success_total's finished_reason label.
const (
	reasonStop   = "stop"
	reasonLength = "length"
	reasonAbort  = "abort"
)

// observer receives what the engine does: the Sim turns it into metrics,
// spans, profiler events and the finished-request log.
type observer interface {
	arrived(r *request)
	admitted(r *request, cached int)
	token(r *request, first bool, itl time.Duration)
	stepDone(s *stepRecord)
	preempted(r *request)
	finished(r *request)
}

// stepRecord is one completed iteration as the observer sees it.
type stepRecord struct {
	start, end time.Duration
	work       stepWork
	cost       stepCost
	running    int
	waiting    int
	kvUsage    float64
}

// engine is vLLM's V1 engine core reduced to what produces its symptoms: a
// scheduler with max-num-seqs running slots and a FCFS waiting queue, a
// token budget per step with chunked prefill, a KV pool of fixed-size blocks
// that preempts (and later recomputes) the newest running request when a
// running one cannot grow, and a step whose duration comes from costOf.
// Its clock is a time.Duration since the sim's start; it is not safe for
// concurrent use (the Sim locks around it).
type engine struct {
	cfg      EngineConfig // effective: the scenario's overrides applied
	slowdown float64
	obs      observer
	// gpuSlowdown, when set, says how much slower than nominal the GPU runs
	// a step starting at now (1: not at all); see gpu.go.
	gpuSlowdown func(now time.Duration) float64

	now        time.Duration
	waiting    []*request
	running    []*request
	usedBlocks int
	warmPrefix int // longest shared prefix whose blocks the prefix cache holds

	inflight  bool
	stepStart time.Duration
	stepEnd   time.Duration
	batch     []*request
	work      stepWork
	cost      stepCost
	// holdUntil is when the scheduler thread is free again after a stall
	// (a profiler export on it: SGLang's stop, see sglang_profiler.go): no
	// step starts before it. 0: no stall.
	holdUntil time.Duration
}

// held says whether the scheduler thread is stalled at now.
func (e *engine) held() bool { return e.now < e.holdUntil }

// hasWork says whether any request waits or runs.
func (e *engine) hasWork() bool { return len(e.waiting)+len(e.running) > 0 }

// hold stalls the scheduler thread from the end of the iteration in flight
// (or now) until until; a later call replaces it. A stall that ends before
// now lets the engine resume at once.
func (e *engine) hold(until time.Duration) {
	e.holdUntil = until
	if !e.inflight && !e.held() && e.hasWork() {
		e.startStep()
	}
}

func newEngine(cfg EngineConfig, obs observer) *engine {
	return &engine{cfg: cfg, slowdown: 1, obs: obs}
}

// configure applies a scenario's engine overrides; requests in flight keep
// their state and adapt at the next step (a smaller pool preempts).
func (e *engine) configure(base EngineConfig, sc Scenario) {
	cfg := base
	if sc.MaxNumSeqs > 0 {
		cfg.MaxNumSeqs = sc.MaxNumSeqs
	}
	if sc.MaxNumBatchedTokens > 0 {
		cfg.MaxNumBatchedTokens = sc.MaxNumBatchedTokens
	}
	if sc.NumGPUBlocks > 0 {
		cfg.NumGPUBlocks = max(sc.NumGPUBlocks, ceilDiv(cfg.MaxModelLen, cfg.BlockSize))
	}
	e.cfg = cfg
	e.slowdown = max(sc.GEMMSlowdown, 1)
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func (e *engine) blocksFor(tokens int) int { return ceilDiv(tokens, e.cfg.BlockSize) }

func (e *engine) freeBlocks() int { return e.cfg.NumGPUBlocks - e.usedBlocks }

// kvUsage is the share of the pool in use, as vllm:kv_cache_usage_perc.
func (e *engine) kvUsage() float64 {
	return min(1, float64(e.usedBlocks)/float64(e.cfg.NumGPUBlocks))
}

// add queues a new request and starts a step if the engine was idle.
func (e *engine) add(r *request) {
	r.arrival = e.now
	e.waiting = append(e.waiting, r)
	e.obs.arrived(r)
	if !e.inflight {
		e.startStep()
	}
}

// startStep drops aborted and timed-out requests, schedules the next
// iteration and prices it; with nothing to run the engine goes idle. While
// the scheduler thread is stalled (held) nothing starts: the stall's end
// starts the next iteration (hold, advanceTo).
func (e *engine) startStep() {
	if e.held() {
		return
	}
	e.reapAborts()
	budget := e.cfg.MaxNumBatchedTokens
	e.batch = e.batch[:0]
	preempted := false
	for i := 0; i < len(e.running) && budget > 0; i++ {
		r := e.running[i]
		c := min(r.pending(), budget)
		ok, pre := e.grow(r, c)
		preempted = preempted || pre
		if !ok {
			break // r itself was preempted: it was the last running request
		}
		r.chunk = c
		budget -= c
		e.batch = append(e.batch, r)
	}
	if !preempted {
		e.admit(budget)
	}
	if len(e.batch) == 0 {
		e.inflight = false
		return
	}
	e.work = e.workOf(e.batch)
	gpu := 1.0
	if e.gpuSlowdown != nil {
		gpu = e.gpuSlowdown(e.now)
	}
	e.cost = costOf(e.work, e.slowdown, gpu)
	e.inflight = true
	e.stepStart = e.now
	e.stepEnd = e.now + e.cost.total
}

// grow allocates the blocks r needs for c more tokens, preempting the newest
// running requests until they fit. ok is false when r itself had to go;
// preempted says whether anyone did.
func (e *engine) grow(r *request, c int) (ok, preempted bool) {
	for {
		need := e.blocksFor(r.computed+c) - r.blocks
		if need <= e.freeBlocks() {
			e.usedBlocks += need
			r.blocks += need
			return true, preempted
		}
		victim := e.running[len(e.running)-1]
		e.running = e.running[:len(e.running)-1]
		e.preempt(victim)
		preempted = true
		if victim == r {
			return false, true
		}
	}
}

// preempt frees a running request's blocks and puts it at the head of the
// waiting queue; it will recompute its prompt and generated tokens.
func (e *engine) preempt(r *request) {
	e.usedBlocks -= r.blocks
	r.blocks = 0
	r.computed = 0
	r.preemptions++
	e.waiting = slices.Insert(e.waiting, 0, r)
	e.obs.preempted(r)
}

// admit moves waiting requests into the batch, first come first served,
// while slots, token budget and KV blocks allow.
func (e *engine) admit(budget int) {
	for len(e.waiting) > 0 && len(e.running) < e.cfg.MaxNumSeqs && budget > 0 {
		r := e.waiting[0]
		cached := 0
		if r.computed == 0 && !e.cfg.NoPrefixCaching {
			cached = min(r.sharedPrefix, e.warmPrefix, r.prompt-1) / e.cfg.BlockSize * e.cfg.BlockSize
		}
		c := min(r.prompt+r.generated-cached, budget)
		need := e.blocksFor(cached+c) - r.blocks
		if need > e.freeBlocks() {
			break // head-of-line: vLLM does not skip ahead
		}
		e.waiting = e.waiting[1:]
		e.usedBlocks += need
		r.blocks += need
		r.computed = cached
		if !r.scheduledOnce {
			r.scheduledOnce = true
			r.scheduled = e.now
			r.cached = cached
		}
		e.obs.admitted(r, cached)
		r.chunk = c
		budget -= c
		e.running = append(e.running, r)
		e.batch = append(e.batch, r)
	}
}

// workOf sums what the scheduled requests compute this step.
func (e *engine) workOf(batch []*request) stepWork {
	var w stepWork
	for _, r := range batch {
		if r.decoding() {
			w.decodeSeqs++
			w.decodeCtx += r.computed + 1
		} else {
			w.prefillTokens += r.chunk
			w.prefillPairs += float64(r.chunk) * (float64(r.computed) + float64(r.chunk)/2)
		}
		if r.computed+r.chunk >= r.prompt+r.generated {
			w.sampled++
		}
	}
	return w
}

// completeStep ends the iteration in flight at e.now: the scheduled tokens
// enter the KV cache, requests whose prompt is done sample a token, and
// requests that reached their length finish.
func (e *engine) completeStep() {
	e.inflight = false
	for _, r := range e.batch {
		if r.done() {
			continue // aborted while the step ran
		}
		r.computed += r.chunk
		r.chunk = 0
		if r.computed < r.prompt+r.generated {
			continue // a prefill chunk: no token yet
		}
		if r.sharedPrefix > e.warmPrefix && r.computed >= r.sharedPrefix {
			e.warmPrefix = r.sharedPrefix
		}
		r.generated++
		first := !r.hasFirst
		var itl time.Duration
		if first {
			r.hasFirst = true
			r.firstToken = e.now
		} else {
			itl = e.now - r.lastToken
		}
		r.lastToken = e.now
		e.obs.token(r, first, itl)
		if r.generated >= r.target {
			reason := reasonStop
			if r.generated >= r.maxTokens {
				reason = reasonLength
			}
			e.finish(r, reason)
		}
	}
	e.running = slices.DeleteFunc(e.running, (*request).done)
	e.obs.stepDone(&stepRecord{
		start: e.stepStart, end: e.now, work: e.work, cost: e.cost,
		running: len(e.running), waiting: len(e.waiting), kvUsage: e.kvUsage(),
	})
}

// reapAborts finishes, with reason abort, every request whose client gave up
// (its timeout passed or its HTTP connection closed).
func (e *engine) reapAborts() {
	gone := func(r *request) bool {
		if r.abortRequested || (r.deadline > 0 && e.now >= r.deadline) {
			e.finish(r, reasonAbort)
			return true
		}
		return false
	}
	e.waiting = slices.DeleteFunc(e.waiting, gone)
	e.running = slices.DeleteFunc(e.running, gone)
}

// finish records the outcome and frees the request's blocks; the caller
// removes it from the queue it was in.
func (e *engine) finish(r *request, reason string) {
	e.usedBlocks -= r.blocks
	r.blocks = 0
	r.reason = reason
	r.finishedAt = e.now
	e.obs.finished(r)
}
