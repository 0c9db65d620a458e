package vllmsim

import (
	"math"
	"time"
)

// The engine's events as SGLang's processes record them (SGLANG.md §1, §4):
// the scheduler writes its gauges at log points and observes queue time
// and stage latencies; the tokenizer sees a request's output in chunks and
// counts it when it finishes. Every method runs with Sim.mu held.

func streamLabel(r *request) string {
	if r.stream {
		return "true"
	}
	return "false"
}

// tokStream is the tokenizer's label values for a family split by
// is_streaming (2026) or not (0.4).
func (m *sglangMetrics) tokStream(r *request) []string {
	if m.era == SGLangEra2026 {
		return plus(m.tok, streamLabel(r))
	}
	return m.tok
}

// arrived: the scheduler receives r and queues it.
func (m *sglangMetrics) arrived(r *request) {
	switch m.era {
	case SGLangEra2026:
		// request_process: scheduler receipt to wait-queue entry.
		m.stage.with(plus(m.sched, "request_process")...).observe(sglangRequestProcess(r).Seconds())
	case SGLangEra04:
		// generate_request returns a streamed request's generator at once;
		// the decorator times only that (fixture 3: 14007 calls, 4.5 s).
		if r.stream {
			m.funcLatency.with("generate_request").observe(0.0003)
		}
	}
}

// admitted: r enters a prefill batch; the first time, its queue time is
// observed (forward entry minus wait-queue entry, once per request).
func (m *sglangMetrics) admitted(r *request, cached int) {
	m.pendingCache += cached
	if r.preemptions > 0 {
		return // a retracted request re-entering: not a new sequence
	}
	m.batchNew++
	m.batchCached += cached
	if m.era != SGLangEra2026 {
		return
	}
	m.queueTime.with(m.sched...).observe((r.scheduled - r.arrival).Seconds())
	m.effective.with(plus(m.sched, "input")...).add(float64(r.prompt - cached))
	if cached > 0 {
		m.effective.with(plus(m.sched, "device_hit")...).add(float64(cached))
	}
}

// token: r sampled a token at now.
func (m *sglangMetrics) token(r *request, first bool, itl time.Duration, now time.Duration) {
	if m.era == SGLangEra035 {
		// v0.3.5 counted in the scheduler, per token (fixture 1: TPOT count
		// = generated tokens - first tokens; TTFT counts requests in flight).
		m.genTotal.with(m.tok...).add(1)
		if first {
			m.ttft.with(m.tok...).observe((now - r.arrival).Seconds())
			m.promptTotal.with(m.tok...).add(float64(r.prompt))
		} else {
			m.tpot.with(m.tok...).observe(itl.Seconds())
		}
		return
	}
	if first && m.era == SGLangEra2026 {
		m.stage.with(plus(m.sched, "prefill_forward")...).observe((now - r.scheduled).Seconds())
	}
	if r.stream || (m.era == SGLangEra2026 && r.generated-r.chunkTokens >= sglangForceStreamInterval) {
		m.chunk(r, now)
	}
}

// chunk: r's output so far reaches the tokenizer at now. The first chunk
// gives TTFT; each later one an inter-token latency, token-weighted in 2026
// (SGLANG.md §4), one interval/tokens sample in 0.4.
func (m *sglangMetrics) chunk(r *request, now time.Duration) {
	n := r.generated - r.chunkTokens
	if n <= 0 {
		return
	}
	if r.chunks == 0 {
		r.firstChunkAt = now
		m.ttft.with(m.tokStream(r)...).observe((now - r.arrival).Seconds())
	} else {
		interval := (now - r.chunkAt).Seconds()
		if m.era == SGLangEra2026 {
			m.itl.with(m.tok...).observeWeighted(interval/float64(n), interval, float64(n))
		} else {
			m.tpot.with(m.tok...).observe(interval / float64(n))
		}
	}
	r.chunks++
	r.chunkAt, r.chunkTokens = now, r.generated
}

// preempted: the scheduler retracts r.
func (m *sglangMetrics) preempted(r *request) {
	m.stats.retracted++
	if m.era != SGLangEra2026 {
		return
	}
	m.retractedTotal.with(m.sched...).add(1)
	m.retractedIn.with(m.sched...).add(float64(r.prompt))
	m.retractedOut.with(m.sched...).add(float64(r.generated))
}

// stepDone: a forward pass ended. A prefill batch is a log point; so is
// every decode-log-interval-th decode batch.
func (m *sglangMetrics) stepDone(e *engine, st *stepRecord) {
	m.busy += st.end - st.start
	m.pendingCompute += st.work.prefillTokens
	m.pendingDecode += st.work.decodeSeqs
	m.genSinceDecode += st.work.decodeSeqs
	prefill := st.work.prefillTokens > 0
	if m.era == SGLangEra2026 {
		mode := "decode_cuda_graph"
		if prefill {
			mode = "prefill_none"
		}
		m.cudaGraph.with(plus(m.sched, mode)...).add(1)
		m.chunkedPrefill(e, st.end)
	}
	s := &m.stats
	if prefill {
		s.isCudaGraph = 0
		s.newSeq, s.newToken, s.cache = m.batchNew, st.work.prefillTokens, m.batchCached
		s.cacheHitRate = float64(m.batchCached) / float64(m.batchCached+st.work.prefillTokens)
		m.batchNew, m.batchCached = 0, 0
		m.log(e, st.end)
		return
	}
	m.decodeBatches++
	s.newTokenRatio = max(0.098, s.newTokenRatio-0.001)
	if m.decodeBatches%sglangDecodeLogInterval != 0 {
		return
	}
	if w := (st.end - m.lastDecodeLog).Seconds(); w > 0 {
		s.genThroughput = float64(m.genSinceDecode) / w
	}
	m.genSinceDecode, m.lastDecodeLog = 0, st.end
	s.isCudaGraph = 1
	s.newSeq, s.newToken, s.cache = 0, 0, 0
	if m.era == SGLangEra2026 {
		s.cacheHitRate = 0 // decode log points write 0 to it (SGLANG.md §4)
	}
	s.decodeSumSeqLens = 0
	for _, r := range e.running {
		s.decodeSumSeqLens += r.computed + 1
	}
	m.log(e, st.end)
}

// chunkedPrefill observes the chunked_prefill stage of every first prefill
// that ran a chunk but not its last one this step.
func (m *sglangMetrics) chunkedPrefill(e *engine, now time.Duration) {
	for _, r := range e.batch {
		if r.done() || r.hasFirst || r.computed >= r.prompt+r.generated {
			continue
		}
		from := max(r.prefillAt, r.scheduled)
		m.stage.with(plus(m.sched, "chunked_prefill")...).observe((now - from).Seconds())
		r.prefillAt = now
	}
}

// idle is 2026's _maybe_log_idle_metrics: an idle scheduler writes its
// gauges every 30 s.
func (m *sglangMetrics) idle(e *engine, now time.Duration) {
	if m.era != SGLangEra2026 || e.inflight || now-m.lastLog < sglangIdleLogInterval {
		return
	}
	m.stats.genThroughput = 0
	m.log(e, now)
}

// log is a log point: the stats take the engine's state now and every
// gauge is written from them; the realtime token counters are flushed.
func (m *sglangMetrics) log(e *engine, now time.Duration) {
	s := &m.stats
	s.running, s.queue = len(e.running), len(e.waiting)
	s.maxTokens = e.cfg.NumGPUBlocks * e.cfg.BlockSize
	s.usedTokens = min(e.usedBlocks*e.cfg.BlockSize, s.maxTokens)
	s.fullUsage = float64(s.usedTokens) / float64(s.maxTokens)
	// Rounded to two places, as both recorded eras print it (0.01, 0.28).
	s.tokenUsage = math.Round(s.fullUsage*100) / 100
	s.evictable = 0
	if !e.cfg.NoPrefixCaching {
		s.evictable = min(e.warmPrefix/e.cfg.BlockSize*e.cfg.BlockSize, s.maxTokens-s.usedTokens)
	}
	if w := now - m.lastLog; w > 0 {
		s.fwdOccupancy = 100 * min(1, m.busy.Seconds()/w.Seconds())
	}
	m.busy = 0
	for _, g := range m.gauges {
		g.f.with(plus(m.sched, g.extra...)...).set(g.val(s))
	}
	s.retracted = 0
	if m.era == SGLangEra2026 {
		for _, t := range []struct {
			mode string
			n    *int
		}{{"prefill_compute", &m.pendingCompute}, {"prefill_cache", &m.pendingCache}, {"decode", &m.pendingDecode}} {
			if *t.n > 0 {
				m.realtime.with(plus(m.sched, t.mode)...).add(float64(*t.n))
			}
			*t.n = 0
		}
	}
	m.lastLog = now
}

// finished: r ends (stop, length or abort) at now, and the tokenizer
// records it: every finished request, aborted ones included, counts in
// the request counter and e2e (SGLANG.md §4).
func (m *sglangMetrics) finished(r *request, now time.Duration) {
	e2e := (now - r.arrival).Seconds()
	switch m.era {
	case SGLangEra035:
		queue := e2e
		if r.scheduledOnce {
			queue = (r.scheduled - r.arrival).Seconds()
		}
		m.reqPrompt.with(m.tok...).observe(float64(r.prompt))
		m.reqGen.with(m.tok...).observe(float64(r.generated))
		m.e2e.with(m.tok...).observe(e2e)
		m.waitingLatency.with(m.tok...).observe(queue)
		return
	case SGLangEra04:
		if !r.stream {
			// The whole answer arrives at finish: TTFT ≈ e2e (fixture 2),
			// one TPOT sample of e2e per token, and generate_request
			// returns only now.
			if r.reason != reasonAbort && r.generated > 0 {
				m.chunk(r, now)
				m.tpot.with(m.tok...).observe(e2e / float64(r.generated))
			}
			m.funcLatency.with("generate_request").observe(e2e + 0.0009)
		}
		m.promptTotal.with(m.tok...).add(float64(r.prompt))
		m.genTotal.with(m.tok...).add(float64(r.generated))
		m.e2e.with(m.tok...).observe(e2e)
		return
	}
	if r.reason == reasonAbort {
		m.abortedTotal.with(m.tok...).add(1)
	} else {
		m.chunk(r, now) // a non-streamed request's last (or only) output
	}
	st := plus(m.tok, streamLabel(r))
	m.promptTotal.with(st...).add(float64(r.prompt))
	m.genTotal.with(st...).add(float64(r.generated))
	if r.cached > 0 {
		m.cachedTotal.with(plus(m.tok, "device")...).add(float64(r.cached))
	}
	m.requestsTotal.with(st...).add(1)
	m.e2e.with(st...).observe(e2e)
	m.promptHist.with(m.tok...).observe(float64(r.prompt))
	m.uncachedHist.with(m.tok...).observe(float64(r.prompt - r.cached))
	m.genHist.with(m.tok...).observe(float64(r.generated))
}
