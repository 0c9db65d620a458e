package vllmsim

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func newSGLangSpanSim(t *testing.T, era string) (*Sim, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	s, err := New(Options{Engine: EngineSGLang, SGLangEra: era, Load: NoLoad, SpanExporter: exp, Model: "test/model",
		ServiceName: "vllm-server", Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s, exp
}

func spanAttrs(sp sdktrace.ReadOnlySpan) map[string]any {
	out := map[string]any{}
	for _, kv := range sp.Attributes() {
		out[string(kv.Key)] = kv.Value.AsInterface()
	}
	return out
}

// TestSGLangSpans (SGLANG.md §6): with engine sglang a request's trace is
// SGLang's tree: service.name "sglang" whatever ServiceName says, a root
// "Req <rid[:8]>" parented by the client's traceparent with rid, module and
// the gen_ai attributes at finish (a non-streamed request's TTFT is its
// e2e), a scheduler thread span under it, and the slices request_process,
// prefill_waiting, prefill_forward, decode_loop under that, in order and
// inside the root.
func TestSGLangSpans(t *testing.T) {
	s, exp := newSGLangSpanSim(t, SGLangEra2026)
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	req := httptest.NewRequest("POST", "/v1/completions", strings.NewReader(`{"prompt":"`+strings.Repeat("word ", 200)+`","max_tokens":30}`))
	req.Header.Set("X-Request-Id", "7f3a9c2e51d04b6e")
	req.Header.Set("traceparent", parent)
	if rec := serve(t, s, req); rec.Code != 200 {
		t.Fatalf("%d %s", rec.Code, rec.Body.String())
	}
	if err := s.spans.flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, sp := range exp.GetSpans().Snapshots() {
		byName[sp.Name()] = sp
	}
	root, ok := byName["Req 7f3a9c2e"]
	if !ok {
		t.Fatalf("no root span \"Req 7f3a9c2e\" among %v", keys(byName))
	}
	if sn := root.Resource().Attributes(); len(sn) != 1 || string(sn[0].Key) != "service.name" || sn[0].Value.AsString() != "sglang" {
		t.Errorf("resource %v, want service.name=sglang (hard-coded by SGLang)", sn)
	}
	if root.Parent().SpanID().String() != "00f067aa0ba902b7" || root.SpanContext().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("root parent %v trace %v: the traceparent must be its parent", root.Parent().SpanID(), root.SpanContext().TraceID())
	}
	a := spanAttrs(root)
	if a["rid"] != "7f3a9c2e51d04b6e" || a["module"] != "sglang::request" {
		t.Errorf("rid %v, module %v", a["rid"], a["module"])
	}
	reqs := s.Requests()
	if len(reqs) != 1 || reqs[0].TraceID != root.SpanContext().TraceID().String() || reqs[0].SpanID != root.SpanContext().SpanID().String() {
		t.Fatalf("finished log %+v does not name the root span", reqs)
	}
	f := reqs[0]
	wantF := map[string]float64{attrE2E: f.E2E, attrTTFT: f.E2E, attrPrefill: f.E2E, attrInference: f.E2E, attrQueue: f.Queue, attrDecode: 0}
	for k, want := range wantF {
		got, ok := a[k].(float64)
		if !ok || got < want-1e-9 || got > want+1e-9 {
			t.Errorf("%s = %v, want %.4f", k, a[k], want)
		}
	}
	if a[attrPromptTokens] != int64(f.PromptTokens) || a[attrCompletionToken] != int64(f.OutputTokens) || f.OutputTokens < 1 {
		t.Errorf("usage %v/%v, request %d/%d", a[attrPromptTokens], a[attrCompletionToken], f.PromptTokens, f.OutputTokens)
	}

	var thread sdktrace.ReadOnlySpan
	for name, sp := range byName {
		if strings.HasPrefix(name, "Scheduler [TP 0] (host:") {
			thread = sp
		}
	}
	if thread == nil || thread.Parent().SpanID() != root.SpanContext().SpanID() {
		t.Fatalf("no scheduler thread span under the root among %v", keys(byName))
	}
	prev := root.StartTime()
	for _, name := range []string{"request_process", "prefill_waiting", "prefill_forward", "decode_loop"} {
		sp, ok := byName[name]
		if !ok {
			t.Errorf("no %s slice", name)
			continue
		}
		if sp.Parent().SpanID() != thread.SpanContext().SpanID() {
			t.Errorf("%s: parent %v, want the scheduler thread span", name, sp.Parent().SpanID())
		}
		if sp.StartTime().Before(prev) || sp.EndTime().Before(sp.StartTime()) || sp.EndTime().After(root.EndTime()) {
			t.Errorf("%s: [%v, %v] out of order or outside the root [%v, %v]", name, sp.StartTime(), sp.EndTime(), root.StartTime(), root.EndTime())
		}
		prev = sp.StartTime()
	}
	if got := byName["prefill_forward"].EndTime().Sub(root.StartTime()).Seconds(); got > f.TTFT+1e-9 {
		t.Errorf("prefill_forward ends %.4f s in, after the first chunk at %.4f s", got, f.TTFT)
	}
}

// TestSGLangAbortSpan: an aborted request's thread span has status ERROR
// and the finish reason; its root has no TTFT (no chunk reached the
// tokenizer).
func TestSGLangAbortSpan(t *testing.T) {
	s, exp := newSGLangSpanSim(t, SGLangEra2026)
	r := addRequest(s, 200, 400, false, time.Second)
	s.Advance(3 * time.Second)
	if r.reason != reasonAbort {
		t.Fatalf("reason %q, want abort", r.reason)
	}
	if err := s.spans.flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var rootOK, threadOK bool
	for _, sp := range exp.GetSpans().Snapshots() {
		switch {
		case strings.HasPrefix(sp.Name(), "Req "):
			_, hasTTFT := spanAttrs(sp)[attrTTFT]
			rootOK = !hasTTFT
		case strings.HasPrefix(sp.Name(), "Scheduler "):
			threadOK = sp.Status().Code == codes.Error && strings.Contains(spanAttrs(sp)["finish_reason"].(string), `"abort"`)
		}
	}
	if !rootOK || !threadOK {
		t.Errorf("root without TTFT %v, thread span ERROR with the finish reason %v", rootOK, threadOK)
	}
}

// TestSGLangOldErasExportNoSpans: the 0.4 and 0.3.5 eras predate SGLang's
// tracing: nothing reaches the exporter and the finished log names no trace.
func TestSGLangOldErasExportNoSpans(t *testing.T) {
	for _, era := range []string{SGLangEra04, SGLangEra035} {
		s, exp := newSGLangSpanSim(t, era)
		addRequest(s, 100, 10, true, 0)
		s.Advance(2 * time.Second)
		if err := s.spans.flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		reqs := s.Requests()
		if len(reqs) != 1 || reqs[0].TraceID != "" || len(exp.GetSpans()) != 0 {
			t.Errorf("era %s: %d spans exported, finished log %+v; want none and no trace id", era, len(exp.GetSpans()), reqs)
		}
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
