package vllmsim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Span attribute keys vLLM sets on llm_request (vllm/tracing.py SpanAttributes).
const (
	attrResponseModel   = "gen_ai.response.model"
	attrRequestID       = "gen_ai.request.id"
	attrMaxTokens       = "gen_ai.request.max_tokens"
	attrTemperature     = "gen_ai.request.temperature"
	attrTopP            = "gen_ai.request.top_p"
	attrN               = "gen_ai.request.n"
	attrNumSequences    = "gen_ai.usage.num_sequences"
	attrPromptTokens    = "gen_ai.usage.prompt_tokens"
	attrCompletionToken = "gen_ai.usage.completion_tokens"
	attrQueue           = "gen_ai.latency.time_in_queue"
	attrTTFT            = "gen_ai.latency.time_to_first_token"
	attrE2E             = "gen_ai.latency.e2e"
	attrPrefill         = "gen_ai.latency.time_in_model_prefill"
	attrDecode          = "gen_ai.latency.time_in_model_decode"
	attrInference       = "gen_ai.latency.time_in_model_inference"
)

// spanEmitter makes one llm_request span per finished request, with the
// simulated clock's timestamps, and exports them when an exporter is set.
// Without one the spans are still made, for their ids.
type spanEmitter struct {
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
}

func newSpanEmitter(o Options, rng *rand.Rand) (*spanEmitter, error) {
	exp := o.SpanExporter
	if !o.sglangTraces() {
		exp = nil // an SGLang era before tracing: nothing is exported
	} else if exp == nil && o.OTLPEndpoint != "" {
		var err error
		if exp, err = otlpExporter(o.OTLPEndpoint, o.OTLPProtocol); err != nil {
			return nil, err
		}
	}
	res := []attribute.KeyValue{attribute.String("service.name", o.ServiceName)}
	for k, v := range o.ResourceAttributes {
		if k != "service.name" {
			res = append(res, attribute.String(k, v))
		}
	}
	popts := []sdktrace.TracerProviderOption{
		sdktrace.WithResource(resource.NewSchemaless(res...)),
		sdktrace.WithIDGenerator(&seededIDs{rng: rng}),
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
	}
	if exp != nil {
		popts = append(popts, sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(200*time.Millisecond)))
	}
	tp := sdktrace.NewTracerProvider(popts...)
	return &spanEmitter{tp: tp, tracer: tp.Tracer("vllm.llm_engine")}, nil
}

// otlpExporter builds the OTLP exporter for endpoint, "host:port" or a URL
// (http:// means no TLS). Over HTTP a URL with no path gets /v1/traces, as
// OTEL_EXPORTER_OTLP_ENDPOINT does; WithEndpointURL alone would post to "/".
func otlpExporter(endpoint, protocol string) (sdktrace.SpanExporter, error) {
	ctx := context.Background() // the exporters connect lazily; nothing blocks here
	isURL := strings.Contains(endpoint, "://")
	switch protocol {
	case "http/protobuf":
		opts := []otlptracehttp.Option{otlptracehttp.WithEndpoint(endpoint), otlptracehttp.WithInsecure()}
		if isURL {
			opts = []otlptracehttp.Option{otlptracehttp.WithEndpointURL(withTracesPath(endpoint))}
		}
		return otlptracehttp.New(ctx, opts...)
	default:
		opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(endpoint), otlptracegrpc.WithInsecure()}
		if isURL {
			opts = []otlptracegrpc.Option{otlptracegrpc.WithEndpointURL(endpoint)}
		}
		exp, err := otlptracegrpc.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("otlp grpc %s: %w", endpoint, err)
		}
		return exp, nil
	}
}

// emit makes r's span, parented by the client's traceparent when it sent
// one, and returns its trace and span ids.
func (e *spanEmitter) emit(r *request, f FinishedRequest, model string) (traceID, spanID string) {
	ctx := context.Background() // spans are made after the fact, outside any request
	if r.parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, r.parent)
	}
	attrs := []attribute.KeyValue{
		attribute.String(attrResponseModel, model),
		attribute.String(attrRequestID, r.id),
		attribute.Int(attrPromptTokens, f.PromptTokens),
		attribute.Int(attrCompletionToken, f.OutputTokens),
		attribute.Int(attrNumSequences, max(r.params.n, 1)),
		attribute.Float64(attrQueue, f.Queue),
		attribute.Float64(attrTTFT, f.TTFT),
		attribute.Float64(attrE2E, f.E2E),
		attribute.Float64(attrPrefill, f.Prefill),
		attribute.Float64(attrDecode, f.Decode),
		attribute.Float64(attrInference, f.Inference),
	}
	if r.params.maxTokensSet {
		attrs = append(attrs, attribute.Int(attrMaxTokens, r.maxTokens))
	}
	if r.params.temperature != nil {
		attrs = append(attrs, attribute.Float64(attrTemperature, *r.params.temperature))
	}
	if r.params.topP != nil {
		attrs = append(attrs, attribute.Float64(attrTopP, *r.params.topP))
	}
	if r.params.n > 0 {
		attrs = append(attrs, attribute.Int(attrN, r.params.n))
	}
	_, span := e.tracer.Start(ctx, "llm_request",
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(f.Arrival),
		trace.WithAttributes(attrs...))
	span.End(trace.WithTimestamp(f.Finished))
	sc := span.SpanContext()
	return sc.TraceID().String(), sc.SpanID().String()
}

func (e *spanEmitter) flush(ctx context.Context) error { return e.tp.ForceFlush(ctx) }

func (e *spanEmitter) shutdown(ctx context.Context) error { return e.tp.Shutdown(ctx) }

// seededIDs generates trace and span ids from the sim's seed, so runs with
// the same seed have the same ids.
type seededIDs struct {
	mu  sync.Mutex
	rng *rand.Rand
}

var _ sdktrace.IDGenerator = (*seededIDs)(nil)

// NewIDs returns a new trace id and span id.
func (g *seededIDs) NewIDs(context.Context) (trace.TraceID, trace.SpanID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var tid trace.TraceID
	for !tid.IsValid() {
		putUint64(tid[:8], g.rng.Uint64())
		putUint64(tid[8:], g.rng.Uint64())
	}
	return tid, g.spanID()
}

// NewSpanID returns a new span id within a trace.
func (g *seededIDs) NewSpanID(context.Context, trace.TraceID) trace.SpanID {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.spanID()
}

func (g *seededIDs) spanID() trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		putUint64(sid[:], g.rng.Uint64())
	}
	return sid
}

func putUint64(b []byte, v uint64) {
	for i := range 8 {
		b[i] = byte(v >> (56 - 8*i))
	}
}

// withTracesPath gives an OTLP/HTTP endpoint URL with no path the signal path.
func withTracesPath(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Path != "" && u.Path != "/") {
		return endpoint
	}
	u.Path = "/v1/traces"
	return u.String()
}
