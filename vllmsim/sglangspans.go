package vllmsim

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// SGLang's request trace (SGLANG.md §6): not one llm_request span but a
// tree per request. The root "Req <rid[:8]>" (role empty: a unified
// server) carries rid, module and, at finish, the gen_ai latency and usage
// attributes; under it the scheduler thread's span, whose children are the
// request's slices. Only the 2026 era traces (Options.sglangTraces).

// Attribute keys SGLang sets beyond vLLM's (spans.go).
const (
	attrCachedTokens  = "gen_ai.usage.cached_tokens"
	attrFinishReasons = "gen_ai.response.finish_reasons"
)

// sglangHostID is the thread spans' host id: 8 hex digits, as SGLang
// prints a host's.
const sglangHostID = "5a1e9c3b"

// emitSGLang makes r's span tree with the simulated clock's timestamps and
// returns the root's trace and span ids. pid names the scheduler process.
func (e *spanEmitter) emitSGLang(r *request, f FinishedRequest, model, pid string) (traceID, spanID string) {
	ctx := context.Background() // spans are made after the fact, outside any request
	if r.parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, r.parent)
	}
	rid := r.id
	short := rid
	if len(short) > 8 {
		short = short[:8]
	}
	at := func(d time.Duration) time.Time { return f.Arrival.Add(d - r.arrival) }
	attrs := []attribute.KeyValue{
		attribute.String("rid", rid),
		attribute.String("module", "sglang::request"),
		attribute.String(attrRequestID, rid),
		attribute.String(attrResponseModel, model),
		attribute.Int(attrPromptTokens, f.PromptTokens),
		attribute.Int(attrCompletionToken, f.OutputTokens),
		attribute.Int(attrCachedTokens, f.CachedTokens),
		attribute.Float64(attrE2E, f.E2E),
		attribute.StringSlice(attrFinishReasons, []string{f.Outcome}),
	}
	if r.params.maxTokensSet {
		attrs = append(attrs, attribute.Int(attrMaxTokens, r.maxTokens))
	}
	if r.scheduledOnce {
		attrs = append(attrs, attribute.Float64(attrQueue, f.Queue))
	}
	// The tokenizer's first-token time is its first chunk (SGLANG.md §4),
	// prefill and inference count from the API server's dispatch, which the
	// sim puts at arrival.
	if r.chunks > 0 {
		ttft := (r.firstChunkAt - r.arrival).Seconds()
		attrs = append(attrs,
			attribute.Float64(attrTTFT, ttft),
			attribute.Float64(attrPrefill, ttft),
			attribute.Float64(attrDecode, (r.finishedAt-r.firstChunkAt).Seconds()))
	}
	attrs = append(attrs, attribute.Float64(attrInference, f.E2E))
	ctx, root := e.tracer.Start(ctx, "Req "+short, trace.WithTimestamp(f.Arrival), trace.WithAttributes(attrs...))

	sched := fmt.Sprintf("Scheduler [TP 0] (host:%s | pid:%s)", sglangHostID, pid)
	tctx, thread := e.tracer.Start(ctx, sched, trace.WithTimestamp(f.Arrival), trace.WithAttributes(
		attribute.Int("tp_rank", 0), attribute.Int("pp_rank", 0), attribute.Int("dp_rank", 0),
		attribute.String("host_id", sglangHostID), attribute.String("pid", pid), attribute.String("thread_label", "Scheduler")))
	slice := func(name string, from, to time.Duration) {
		_, sp := e.tracer.Start(tctx, name, trace.WithTimestamp(at(from)))
		sp.End(trace.WithTimestamp(at(to)))
	}
	process := r.arrival + sglangRequestProcess(r)
	slice("request_process", r.arrival, min(process, r.finishedAt))
	if r.scheduledOnce {
		// The engine model has no processing time: a request scheduled at
		// once enters the forward pass after request_process, not before.
		forward := max(process, r.scheduled)
		slice("prefill_waiting", process, forward)
		if r.hasFirst {
			slice("prefill_forward", forward, max(forward, r.firstToken))
			if r.lastToken > r.firstToken {
				slice("decode_loop", r.firstToken, r.lastToken)
			}
		}
	}
	if f.Outcome == reasonAbort {
		thread.SetStatus(codes.Error, "aborted")
		thread.SetAttributes(attribute.String("finish_reason", `{"type": "abort", "message": "client disconnected"}`))
	}
	thread.End(trace.WithTimestamp(f.Finished))
	root.End(trace.WithTimestamp(f.Finished))
	sc := root.SpanContext()
	return sc.TraceID().String(), sc.SpanID().String()
}

// sglangRequestProcess is how long the scheduler takes from receiving r to
// queueing it (the request_process stage).
func sglangRequestProcess(r *request) time.Duration {
	return 300*time.Microsecond + time.Duration(r.prompt)*200*time.Nanosecond
}
