package traces_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/autocapture/autocapture/capture/traces"
	"github.com/autocapture/autocapture/internal/testkit/steptest"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/vocab"
)

// fakeRequest is one llm_request span this test sends, with known attributes.
type fakeRequest struct {
	id                                string
	start                             time.Time
	queue, prefill, decode, ttft, e2e float64
	traceID                           string
}

// sendSpans exports llm_request spans with explicit timestamps to an OTLP/HTTP
// endpoint, as vLLM would, and returns them with their trace ids.
func sendSpans(t *testing.T, endpoint, service string, reqs []fakeRequest) {
	t.Helper()
	sendSpansFrom(t, endpoint, resource.NewSchemaless(semconv.ServiceName(service)), reqs)
}

// sendSpansFrom is sendSpans with the servers' own OTel resource.
func sendSpansFrom(t *testing.T, endpoint string, res *resource.Resource, reqs []fakeRequest) {
	t.Helper()
	ctx := context.Background()
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(endpoint), otlptracehttp.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithResource(res))
	tr := tp.Tracer("vllm")
	for i := range reqs {
		r := &reqs[i]
		_, span := tr.Start(ctx, "llm_request", trace.WithTimestamp(r.start), trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(
				attribute.String("gen_ai.request.id", r.id),
				attribute.Float64("gen_ai.latency.time_in_queue", r.queue),
				attribute.Float64("gen_ai.latency.time_in_model_prefill", r.prefill),
				attribute.Float64("gen_ai.latency.time_in_model_decode", r.decode),
				attribute.Float64("gen_ai.latency.time_to_first_token", r.ttft),
				attribute.Float64("gen_ai.latency.e2e", r.e2e),
				attribute.Int("gen_ai.usage.prompt_tokens", 100+i),
				attribute.Int("gen_ai.usage.completion_tokens", 50),
			))
		r.traceID = span.SpanContext().TraceID().String()
		span.End(trace.WithTimestamp(r.start.Add(time.Duration(r.e2e * float64(time.Second)))))
	}
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// makeRequests builds n requests in [base, base+span) with independent stage
// times, so the orders by ttft, queue and decode all differ from arrival order.
func makeRequests(n int, base time.Time, seed uint64) []fakeRequest {
	rng := rand.New(rand.NewPCG(seed, 7))
	out := make([]fakeRequest, n)
	for i := range out {
		q, p, d := rng.Float64()*3, 0.05+rng.Float64()*0.5, 0.5+rng.Float64()*4
		out[i] = fakeRequest{id: fmt.Sprintf("req-%03d", i), start: base.Add(time.Duration(i) * 500 * time.Millisecond),
			queue: q, prefill: p, decode: d, ttft: q + p + 0.01, e2e: q + p + d + 0.02}
	}
	return out
}

// topBy returns the request ids of the n largest by the value.
func topBy(reqs []fakeRequest, n int, v func(fakeRequest) float64) []string {
	s := append([]fakeRequest(nil), reqs...)
	sort.Slice(s, func(i, j int) bool { return v(s[i]) > v(s[j]) })
	ids := make([]string, 0, n)
	for _, r := range s[:n] {
		ids = append(ids, r.id)
	}
	return ids
}

func slowestIDs(t *testing.T, res *vocab.Result) []string {
	t.Helper()
	sl, _ := res.Findings["slowest"].([]any)
	ids := make([]string, 0, len(sl))
	for _, e := range sl {
		ids = append(ids, e.(map[string]any)["request_id"].(string))
	}
	return ids
}

// TestTracesAgainstRealJaeger sends 80 spans to a real Jaeger and asks for the
// top 5 while letting Jaeger answer at most 20 traces per search: the memory
// store answers the most recent matches, unsorted by any latency, so only the
// floor-raising search finds the true top 5.
func TestTracesAgainstRealJaeger(t *testing.T) {
	j := testenv.StartJaeger(t)
	base := time.Now().Add(-10 * time.Minute).Truncate(time.Second)
	reqs := makeRequests(80, base, 1)
	sendSpans(t, j.OTLPHTTP, "vllm-server", reqs)
	waitForTraces(t, j, len(reqs))

	env, _ := steptest.Env(t)
	env.Traces = &vocab.TracesEndpoint{Endpoint: vocab.Endpoint{URL: j.QueryURL, Timeout: 10 * time.Second},
		Backend: "jaeger", Service: "vllm-server"}
	window := vocab.Window{Start: base.Add(-time.Minute), End: time.Now()}
	cases := []struct {
		name, alertname, rank string
		value                 func(fakeRequest) float64
	}{
		{"ttft alert ranks by ttft", "VLLMHighTTFT", "", func(r fakeRequest) float64 { return r.ttft }},
		{"itl alert ranks by decode", "VLLMHighITL", "", func(r fakeRequest) float64 { return r.decode }},
		{"queue alert ranks by queue", "VLLMQueueDeep", "", func(r fakeRequest) float64 { return r.queue }},
		{"explicit prefill", "VLLMHighAbortRatio", "prefill", func(r fakeRequest) float64 { return r.prefill }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			step := buildStep(t, "traces", func(cfg *traces.Config) {
				cfg.Limit, cfg.Fetch, cfg.RankBy = 5, 20, c.rank
			})
			in := &vocab.Input{RunID: strings.ReplaceAll(t.Name(), "/", "-"), StepID: "slow", Env: env, Window: window,
				Alert: template.Alert{Labels: template.KV{"alertname": c.alertname}}}
			res, err := step.Run(context.Background(), in)
			if err != nil {
				t.Fatal(err)
			}
			want := topBy(reqs, 5, c.value)
			if got := slowestIDs(t, res); strings.Join(got, ",") != strings.Join(want, ",") {
				t.Fatalf("slowest = %v, want %v (findings %v)", got, want, res.Findings)
			}
			t.Logf("%v searches, %v spans examined", res.Findings["searches"], res.Findings["searched"])
			if res.Findings["complete"] != true {
				t.Errorf("search not complete: %v", res.Findings)
			}
			first := res.Findings["slowest"].([]any)[0].(map[string]any)
			if link := first["link"].(string); link != j.QueryURL+"/trace/"+first["trace_id"].(string) {
				t.Errorf("link = %q", link)
			}
			byID := map[string]fakeRequest{}
			for _, r := range reqs {
				byID[r.id] = r
			}
			if r := byID[want[0]]; first["trace_id"] != r.traceID || first["queue"] != r.queue {
				t.Errorf("first = %v, want trace %s queue %v", first, r.traceID, r.queue)
			}
		})
	}
}

// waitForTraces polls until Jaeger holds n traces (the batch processor flushes
// every 100 ms).
func waitForTraces(t *testing.T, j *testenv.Jaeger, n int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for len(j.FindTraces(t, "vllm-server")) < min(n, 100) {
		if time.Now().After(deadline) {
			t.Fatalf("jaeger holds %d traces, want %d", len(j.FindTraces(t, "vllm-server")), n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestTracesBackendDownIsOneLineReason(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String()
	l.Close() // nothing listens there now
	env, _ := steptest.Env(t)
	env.Traces = &vocab.TracesEndpoint{Endpoint: vocab.Endpoint{URL: url, Timeout: 2 * time.Second}, Backend: "jaeger", Service: "vllm-server"}
	step := buildStep(t, "traces", func(cfg *traces.Config) {})
	_, err = step.Run(context.Background(), &vocab.Input{RunID: "r", StepID: "s", Env: env,
		Window: vocab.Window{Start: time.Now().Add(-time.Hour), End: time.Now()}})
	if vocab.Classify(err) != vocab.ReasonUnreachable {
		t.Fatalf("reason = %q (%v), want unreachable", vocab.Classify(err), err)
	}
	if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, url) {
		t.Fatalf("error %q is not one line naming %s", msg, url)
	}
}
