package vllmsim

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// newAPISim is a sim with no built-in load, its spans in memory.
func newAPISim(t *testing.T) (*Sim, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	s, err := New(Options{Load: NoLoad, SpanExporter: exp, Model: "test/model", ServiceName: "sim-test", Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s, exp
}

// serve runs req against the sim in virtual time: the handler blocks until
// the engine, advanced here in 20 ms steps, finishes the request.
func serve(t *testing.T, s *Sim, req *http.Request) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		s.Handler().ServeHTTP(rec, req)
		close(done)
	}()
	for range 3000 {
		select {
		case <-done:
			return rec
		default:
			s.Advance(20 * time.Millisecond)
			time.Sleep(time.Millisecond)
		}
	}
	t.Fatalf("%s %s never answered", req.Method, req.URL)
	return nil
}

func TestStaticRoutes(t *testing.T) {
	s, _ := newAPISim(t)
	for path, want := range map[string]string{
		"/health":    "",
		"/version":   `"version":"0.15.1"`,
		"/v1/models": `"id":"test/model"`,
		"/metrics":   `vllm:num_requests_running{engine="0",model_name="test/model"} 0`,
	} {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code != 200 || !strings.Contains(rec.Body.String(), want) {
			t.Errorf("GET %s: %d %.200q, want 200 containing %q", path, rec.Code, rec.Body.String(), want)
		}
	}
}

// TestCompletionSpanAndRecord: a completion with X-Request-Id and a
// traceparent answers in OpenAI's shape, and its llm_request span and its
// /admin/requests record agree.
func TestCompletionSpanAndRecord(t *testing.T) {
	s, exp := newAPISim(t)
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	req := httptest.NewRequest("POST", "/v1/completions",
		strings.NewReader(`{"model":"test/model","prompt":"`+strings.Repeat("word ", 200)+`","max_tokens":40,"temperature":0.5}`))
	req.Header.Set("X-Request-Id", "req-123")
	req.Header.Set("traceparent", parent)
	rec := serve(t, s, req)
	if rec.Code != 200 || rec.Header().Get("X-Request-Id") != "req-123" {
		t.Fatalf("%d %s (X-Request-Id %q)", rec.Code, rec.Body.String(), rec.Header().Get("X-Request-Id"))
	}
	var body struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Choices []struct {
			Text         string `json:"text"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	if body.ID != "cmpl-req-123" || body.Object != "text_completion" || len(body.Choices) != 1 ||
		body.Usage.PromptTokens != 250 || body.Usage.CompletionTokens < 1 || body.Usage.CompletionTokens > 40 {
		t.Fatalf("response %+v", body)
	}

	if err := s.spans.flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	sp := spans[0]
	attrs := map[string]any{}
	for _, kv := range sp.Attributes {
		attrs[string(kv.Key)] = kv.Value.AsInterface()
	}
	if sp.Name != "llm_request" || sp.SpanKind != trace.SpanKindServer ||
		sp.Parent.SpanID().String() != "00f067aa0ba902b7" ||
		sp.SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("span %s kind %v parent %v trace %v", sp.Name, sp.SpanKind, sp.Parent.SpanID(), sp.SpanContext.TraceID())
	}
	if sn := sp.Resource.Attributes(); len(sn) != 1 || sn[0].Value.AsString() != "sim-test" {
		t.Errorf("resource %v, want service.name=sim-test", sn)
	}
	for _, k := range []string{attrTTFT, attrE2E, attrQueue, attrPrefill, attrDecode, attrInference,
		attrPromptTokens, attrCompletionToken, attrMaxTokens, attrTemperature} {
		if _, ok := attrs[k]; !ok {
			t.Errorf("span lacks %s", k)
		}
	}
	if attrs[attrRequestID] != "req-123" {
		t.Errorf("gen_ai.request.id %v", attrs[attrRequestID])
	}

	reqs := s.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d finished requests", len(reqs))
	}
	r := reqs[0]
	if r.ID != "req-123" || r.TraceID != sp.SpanContext.TraceID().String() || r.SpanID != sp.SpanContext.SpanID().String() {
		t.Errorf("record %+v does not match span %v", r, sp.SpanContext)
	}
	if !sp.StartTime.Equal(r.Arrival) || !sp.EndTime.Equal(r.Finished) || attrs[attrE2E] != r.E2E || attrs[attrTTFT] != r.TTFT {
		t.Errorf("span [%v, %v] e2e %v ttft %v vs record [%v, %v] e2e %v ttft %v",
			sp.StartTime, sp.EndTime, attrs[attrE2E], attrs[attrTTFT], r.Arrival, r.Finished, r.E2E, r.TTFT)
	}
}

func TestChatCompletionAndErrors(t *testing.T) {
	s, _ := newAPISim(t)
	rec := serve(t, s, httptest.NewRequest("POST", "/v1/chat/completions",
		strings.NewReader(`{"model":"test/model","messages":[{"role":"user","content":"hello there"}],"max_tokens":8}`)))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"object":"chat.completion"`) ||
		!strings.Contains(rec.Body.String(), `"role":"assistant"`) {
		t.Fatalf("chat: %d %s", rec.Code, rec.Body.String())
	}
	for name, tc := range map[string]struct {
		body string
		code int
	}{
		"unknown model": {`{"model":"other","prompt":"x"}`, 404},
		"too long":      {`{"prompt":"x","max_tokens":9000}`, 400},
		"bad json":      {`{"prompt":`, 400},
		"streaming":     {`{"prompt":"x","stream":true}`, 400},
	} {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest("POST", "/v1/completions", strings.NewReader(tc.body)))
		if rec.Code != tc.code || !strings.Contains(rec.Body.String(), `"object":"error"`) {
			t.Errorf("%s: %d %s, want %d and an error object", name, rec.Code, rec.Body.String(), tc.code)
		}
	}
}

// TestClientGoneAborts: a client that hangs up turns into an abort.
func TestClientGoneAborts(t *testing.T) {
	s, _ := newAPISim(t)
	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequest("POST", "/v1/completions", strings.NewReader(`{"prompt":"hi","max_tokens":500}`)).WithContext(ctx)
	done := make(chan struct{})
	go func() {
		s.Handler().ServeHTTP(httptest.NewRecorder(), req)
		close(done)
	}()
	for s.State().Running+s.State().Waiting == 0 {
		time.Sleep(time.Millisecond)
	}
	s.Advance(200 * time.Millisecond)
	cancel()
	<-done
	s.Advance(200 * time.Millisecond)
	reqs := s.Requests()
	if len(reqs) != 1 || reqs[0].Outcome != "abort" {
		t.Fatalf("requests %+v, want one abort", reqs)
	}
}

func TestAdminScenarioAndRequests(t *testing.T) {
	s, _ := newAPISim(t)
	h := s.Handler()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/admin/scenario", strings.NewReader(`{"scenario":"client-aborts","load":4}`)))
	var st scenarioReport
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || rec.Code != 200 {
		t.Fatalf("%d %s", rec.Code, rec.Body.String())
	}
	if st.Scenario != ScenarioClientAborts || st.Load.RPS != 4 || len(st.Scenarios) != 7 {
		t.Fatalf("state %+v", st)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/admin/scenario?name=bogus", nil))
	if rec.Code != 400 {
		t.Errorf("unknown scenario: %d", rec.Code)
	}
	s.Advance(30 * time.Second)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/admin/requests?limit=3", nil))
	b, _ := io.ReadAll(rec.Body)
	var reqs []FinishedRequest
	if err := json.Unmarshal(b, &reqs); err != nil || len(reqs) != 3 {
		t.Fatalf("GET /admin/requests?limit=3: %d %.300s", rec.Code, b)
	}
	since := reqs[1].Finished.Format(time.RFC3339Nano)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/admin/requests?since="+since, nil))
	var after []FinishedRequest
	if err := json.Unmarshal(rec.Body.Bytes(), &after); err != nil || len(after) != 1 || after[0].ID != reqs[2].ID {
		t.Fatalf("since=%s: %d requests", since, len(after))
	}
}
