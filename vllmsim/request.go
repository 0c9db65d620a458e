package vllmsim

import (
	"time"

	"go.opentelemetry.io/otel/trace"
)

// request is one generation request inside the engine, from the load
// generator or from the OpenAI API.
type request struct {
	id           string
	parent       trace.SpanContext // the client's traceparent, if any
	prompt       int               // prompt tokens
	sharedPrefix int               // leading tokens shared with other requests
	target       int               // tokens the model produces before it stops
	maxTokens    int               // the max_tokens asked for (length cap)
	params       requestParams
	deadline     time.Duration // when the client gives up (0: never)
	client       int           // closed-loop client number, -1 for others
	loadEpoch    int           // the load generator epoch that sent it

	arrival       time.Duration
	scheduled     time.Duration // first time scheduled
	firstToken    time.Duration
	lastToken     time.Duration
	finishedAt    time.Duration
	scheduledOnce bool
	hasFirst      bool

	computed       int // tokens whose KV is in the cache
	generated      int // tokens sampled so far
	blocks         int // KV blocks held
	cached         int // prompt tokens served by the prefix cache at first admission
	chunk          int // tokens scheduled in the step in flight
	preemptions    int
	abortRequested bool
	reason         string // finish reason once done

	// wait, when set, is closed once the request finishes (HTTP callers).
	wait chan struct{}

	// SGLang's view (sglangobserve.go): whether the client streams (the
	// load generator's clients do; the HTTP API takes stream=false only),
	// the output chunks that reached the tokenizer, and when the last
	// prefill chunk ended.
	stream       bool
	chunks       int
	chunkAt      time.Duration
	chunkTokens  int
	firstChunkAt time.Duration
	prefillAt    time.Duration
}

// requestParams are the sampling parameters a client set, reported as span
// attributes when present.
type requestParams struct {
	maxTokensSet bool
	temperature  *float64
	topP         *float64
	n            int
}

// pending is how many tokens r still has to run through the model before it
// can sample: its prompt (or its recomputation) or the last sampled token.
func (r *request) pending() int { return r.prompt + r.generated - r.computed }

// decoding says r only has its last sampled token to process.
func (r *request) decoding() bool { return r.hasFirst && r.pending() == 1 }

// done says r has finished, with whatever reason.
func (r *request) done() bool { return r.reason != "" }

// FinishedRequest is one finished request as GET /admin/requests reports
// it; durations are in seconds, like vLLM's histograms.
type FinishedRequest struct {
	ID string `json:"id"`
	// TraceID and SpanID are the request's span (SGLang: its root span);
	// empty for an SGLang era that predates tracing.
	TraceID      string    `json:"trace_id"`
	SpanID       string    `json:"span_id"`
	Arrival      time.Time `json:"arrival"`
	Finished     time.Time `json:"finished"`
	Queue        float64   `json:"queue_s"`
	Prefill      float64   `json:"prefill_s"`
	Decode       float64   `json:"decode_s"`
	Inference    float64   `json:"inference_s"`
	TTFT         float64   `json:"ttft_s"`
	E2E          float64   `json:"e2e_s"`
	PromptTokens int       `json:"prompt_tokens"`
	OutputTokens int       `json:"output_tokens"`
	CachedTokens int       `json:"cached_tokens"`
	Preemptions  int       `json:"preemptions"`
	// Outcome is the finished_reason: stop, length or abort.
	Outcome string `json:"outcome"`
}

// timings is the lifecycle split of a finished request, in seconds, as vLLM
// computes it: queue until first scheduled, prefill until the first token,
// decode until the last token, inference from scheduling to the end. An
// aborted request keeps the phases it reached.
func (r *request) timings() (queue, prefill, decode, inference, ttft, e2e float64) {
	sec := func(d time.Duration) float64 { return d.Seconds() }
	e2e = sec(r.finishedAt - r.arrival)
	if !r.scheduledOnce {
		return e2e, 0, 0, 0, 0, e2e
	}
	queue = sec(r.scheduled - r.arrival)
	inference = sec(r.finishedAt - r.scheduled)
	if r.hasFirst {
		ttft = sec(r.firstToken - r.arrival)
		prefill = sec(r.firstToken - r.scheduled)
		decode = sec(r.lastToken - r.firstToken)
	}
	return queue, prefill, decode, inference, ttft, e2e
}

// finishedLog keeps the last N finished requests, oldest first.
type finishedLog struct {
	buf  []FinishedRequest
	next int
	full bool
}

func newFinishedLog(n int) *finishedLog { return &finishedLog{buf: make([]FinishedRequest, n)} }

func (l *finishedLog) add(f FinishedRequest) {
	l.buf[l.next] = f
	l.next++
	if l.next == len(l.buf) {
		l.next, l.full = 0, true
	}
}

// all returns a copy of the kept requests, oldest first.
func (l *finishedLog) all() []FinishedRequest {
	if !l.full {
		return append([]FinishedRequest(nil), l.buf[:l.next]...)
	}
	out := make([]FinishedRequest, 0, len(l.buf))
	out = append(out, l.buf[l.next:]...)
	return append(out, l.buf[:l.next]...)
}
