package vllmsim

import "time"

// The Sim observes its engine: this file turns engine events into vLLM's
// metrics, the llm_request span, profiler events and the finished log. All
// of it runs with s.mu held, from inside the engine's step.

var _ observer = (*Sim)(nil)

// arrived: a request reaches the engine (only SGLang's surface records it).
func (s *Sim) arrived(r *request) {
	if s.sgl != nil {
		s.sgl.arrived(r)
	}
}

// admitted counts a scheduling's prefix-cache lookup, in tokens.
func (s *Sim) admitted(r *request, cached int) {
	if s.sgl != nil {
		s.sgl.admitted(r, cached)
		return
	}
	s.metrics.prefixQueries.Add(float64(r.prompt))
	s.metrics.prefixHits.Add(float64(cached))
}

// token records one sampled token: the first gives TTFT and the prompt
// counters, the others an inter-token latency.
func (s *Sim) token(r *request, first bool, itl time.Duration) {
	if s.sgl != nil {
		s.sgl.token(r, first, itl, s.eng.now)
		return
	}
	m := s.metrics
	m.genTokens.Inc()
	if !first {
		m.itl.Observe(itl.Seconds())
		return
	}
	m.ttft.Observe((r.firstToken - r.arrival).Seconds())
	m.promptTokens.Add(float64(r.prompt))
	m.promptCached.Add(float64(r.cached))
	m.promptBySource.WithLabelValues("local_compute").Add(float64(r.prompt - r.cached))
	m.promptBySource.WithLabelValues("local_cache_hit").Add(float64(r.cached))
}

// stepDone updates the gauges and the per-iteration series, and hands the
// step to the profiler when one is recording.
func (s *Sim) stepDone(st *stepRecord) {
	s.busy.add(spanOf(st.start, st.end, st.work, st.cost))
	if s.prof != nil {
		s.prof.record(s.wall(st.start), st)
	}
	if s.sgl != nil {
		s.sgl.stepDone(s.eng, st)
		return
	}
	m := s.metrics
	m.iterTokens.Observe(float64(st.work.prefillTokens + st.work.decodeSeqs))
	m.running.Set(float64(st.running))
	m.waiting.Set(float64(st.waiting))
	m.waitingByReason.WithLabelValues("capacity").Set(float64(st.waiting))
	m.kvUsage.Set(st.kvUsage)
	m.flops.Add(flopsOf(st.work))
	read, written := bytesOf(st.work)
	m.readBytes.Add(read)
	m.written.Add(written)
}

// preempted counts a preemption (SGLang: a retraction).
func (s *Sim) preempted(r *request) {
	if s.sgl != nil {
		s.sgl.preempted(r)
		return
	}
	s.metrics.preemptions.Inc()
}

// finished records a request's end everywhere it shows: the outcome
// counter, the lifecycle histograms, its span, the finished log, the
// closed-loop client's next request and the HTTP caller waiting for it.
func (s *Sim) finished(r *request) {
	if s.sgl != nil {
		s.sgl.finished(r, s.eng.now)
	} else {
		s.observeFinished(r)
	}
	f := s.record(r)
	if s.prof != nil {
		s.prof.recordRequest(f)
	}
	s.history.add(f)
	s.load.clientDone(r, s.eng.now)
	if r.wait != nil {
		close(r.wait)
	}
}

// observeFinished records a finished request in vLLM's series.
func (s *Sim) observeFinished(r *request) {
	m := s.metrics
	m.success.WithLabelValues(r.reason).Inc()
	queue, prefill, decode, inference, _, e2e := r.timings()
	m.e2e.Observe(e2e)
	m.queue.Observe(queue)
	if r.scheduledOnce {
		m.inference.Observe(inference)
	}
	if r.hasFirst {
		m.prefill.Observe(prefill)
		m.decode.Observe(decode)
		m.kvComputedHist.Observe(float64(r.prompt - r.cached))
	}
	if r.generated > 1 {
		m.tpot.Observe(decode / float64(r.generated-1))
	}
	m.promptHist.Observe(float64(r.prompt))
	m.genHist.Observe(float64(r.generated))
	m.maxGenHist.Observe(float64(r.maxTokens))
	m.maxTokensHist.Observe(float64(r.maxTokens))
	m.nHist.Observe(float64(max(r.params.n, 1)))
}

// record builds the request's FinishedRequest and emits its span.
func (s *Sim) record(r *request) FinishedRequest {
	queue, prefill, decode, inference, ttft, e2e := r.timings()
	f := FinishedRequest{
		ID:           r.id,
		Arrival:      s.wall(r.arrival),
		Finished:     s.wall(r.finishedAt),
		Queue:        queue,
		Prefill:      prefill,
		Decode:       decode,
		Inference:    inference,
		TTFT:         ttft,
		E2E:          e2e,
		PromptTokens: r.prompt,
		OutputTokens: r.generated,
		CachedTokens: r.cached,
		Preemptions:  r.preemptions,
		Outcome:      r.reason,
	}
	switch {
	case s.sgl == nil:
		f.TraceID, f.SpanID = s.spans.emit(r, f, s.opts.Model)
	case s.opts.sglangTraces():
		f.TraceID, f.SpanID = s.spans.emitSGLang(r, f, s.opts.Model, s.sgl.pid)
	}
	return f
}
