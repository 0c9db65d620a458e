package traces_test

import (
	"context"
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

// sendSGLangSpans exports requests as SGLang's tracing does (SGLANG.md §6,
// team notes): service.name "sglang"; per request a root span
// "{role} Req {rid[:8]}" (role empty on a unified server: a leading space;
// "decode" on a PD decode worker, every third here) carrying rid and the
// gen_ai.latency.* attributes, with a scheduler thread span and slice spans
// (prefill_forward, decode_loop) under it that carry none.
func sendSGLangSpans(t *testing.T, endpoint string, reqs []fakeRequest) {
	t.Helper()
	ctx := context.Background()
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(endpoint), otlptracehttp.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("sglang"))))
	tr := tp.Tracer("sglang")
	for i := range reqs {
		r := &reqs[i]
		role := ""
		if i%3 == 2 {
			role = "decode"
		}
		end := r.start.Add(time.Duration(r.e2e * float64(time.Second)))
		rctx, root := tr.Start(ctx, role+" Req "+r.id[:7]+"x", trace.WithTimestamp(r.start),
			trace.WithAttributes(
				attribute.String("rid", r.id),
				attribute.String("module", "sglang::request"),
				attribute.Float64("gen_ai.latency.time_in_queue", r.queue),
				attribute.Float64("gen_ai.latency.time_in_model_prefill", r.prefill),
				attribute.Float64("gen_ai.latency.time_in_model_decode", r.decode),
				attribute.Float64("gen_ai.latency.time_to_first_token", r.ttft),
				attribute.Float64("gen_ai.latency.e2e", r.e2e),
			))
		tctx, thread := tr.Start(rctx, "Scheduler [TP 0] (host:0a0b0c0d | pid:42)", trace.WithTimestamp(r.start),
			trace.WithAttributes(attribute.Int("tp_rank", 0)))
		_, pf := tr.Start(tctx, "prefill_forward", trace.WithTimestamp(r.start))
		pf.End(trace.WithTimestamp(r.start.Add(time.Duration(r.prefill * float64(time.Second)))))
		_, dl := tr.Start(tctx, "decode_loop", trace.WithTimestamp(r.start))
		dl.End(trace.WithTimestamp(end))
		thread.End(trace.WithTimestamp(end))
		r.traceID = root.SpanContext().TraceID().String()
		root.End(trace.WithTimestamp(end))
	}
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestTracesSGLangAgainstRealJaeger: with engine sglang the step searches
// SGLang's own service (whatever traces.service says for vLLM), ranks the
// request root spans only (unified and PD roles), by the same gen_ai
// attributes vLLM's spans carry, and names them by rid.
func TestTracesSGLangAgainstRealJaeger(t *testing.T) {
	j := testenv.StartJaeger(t)
	base := time.Now().Add(-10 * time.Minute).Truncate(time.Second)
	reqs := makeRequests(60, base, 3)
	sendSGLangSpans(t, j.OTLPHTTP, reqs)
	deadline := time.Now().Add(15 * time.Second)
	for len(j.FindTraces(t, "sglang")) < len(reqs) {
		if time.Now().After(deadline) {
			t.Fatalf("jaeger holds %d SGLang traces, want %d", len(j.FindTraces(t, "sglang")), len(reqs))
		}
		time.Sleep(100 * time.Millisecond)
	}
	env, _ := steptest.Env(t)
	env.Traces = &vocab.TracesEndpoint{Endpoint: vocab.Endpoint{URL: j.QueryURL, Timeout: 10 * time.Second},
		Backend: "jaeger", Service: "vllm-server"} // configured for the vLLM fleet
	window := vocab.Window{Start: base.Add(-time.Minute), End: time.Now()}
	for _, c := range []struct {
		name, alertname string
		fetch           int // 100: one search answers every trace; 20: narrowed by the floor
		value           func(fakeRequest) float64
	}{
		{"ttft", "SGLangHighTTFT", 100, func(r fakeRequest) float64 { return r.ttft }},
		{"decode", "SGLangHighITL", 20, func(r fakeRequest) float64 { return r.decode }},
	} {
		t.Run(c.name, func(t *testing.T) {
			step := buildStep(t, "traces", func(cfg *traces.Config) { cfg.Limit, cfg.Fetch, cfg.Engine = 5, c.fetch, vocab.EngineSGLang })
			res, err := step.Run(context.Background(), &vocab.Input{RunID: "r-" + c.name, StepID: "traces", Env: env, Window: window,
				Alert: template.Alert{Labels: template.KV{"alertname": c.alertname}}})
			if err != nil {
				t.Fatal(err)
			}
			want := topBy(reqs, 5, c.value)
			if got := slowestIDs(t, res); strings.Join(got, ",") != strings.Join(want, ",") {
				t.Fatalf("slowest = %v, want %v (findings %v)", got, want, res.Findings)
			}
			if !strings.Contains(res.Summary, "SGLang request") || res.Findings["complete"] != true {
				t.Errorf("summary %q, findings %v", res.Summary, res.Findings)
			}
			// Each trace holds 4 spans; only its root is kept.
			if n := res.Findings["searched"].(int); n > len(reqs) || c.fetch == 100 && n != len(reqs) {
				t.Errorf("%d spans kept of %d traces, want their roots only", n, len(reqs))
			}
		})
	}
	t.Run("vllm's step does not see them", func(t *testing.T) {
		env := *env
		env.Traces = &vocab.TracesEndpoint{Endpoint: env.Traces.Endpoint, Backend: "jaeger", Service: "sglang"}
		step := buildStep(t, "traces", func(cfg *traces.Config) {})
		res, err := step.Run(context.Background(), &vocab.Input{RunID: "r-v", StepID: "traces", Env: &env, Window: window,
			Alert: template.Alert{Labels: template.KV{"alertname": "VLLMHighTTFT"}}})
		if err != nil || len(slowestIDs(t, res)) != 0 {
			t.Fatalf("a vLLM step ranked SGLang spans: %v, %v", res, err)
		}
	})
}

// TestTracesSGLangWithoutSpansSaysHowToExportThem: an SGLang server exports
// spans only when started with --enable-trace; finding none says so.
func TestTracesSGLangWithoutSpansSaysHowToExportThem(t *testing.T) {
	for _, tempo := range []bool{false, true} {
		srv, queries := fakeTraceServer(t, nil, tempo)
		env, _ := steptest.Env(t)
		backend := map[bool]string{false: "jaeger", true: "tempo"}[tempo]
		env.Traces = &vocab.TracesEndpoint{Endpoint: vocab.Endpoint{URL: srv.URL, Timeout: 5 * time.Second}, Backend: backend, Service: "vllm-server"}
		step := buildStep(t, "traces", func(cfg *traces.Config) { cfg.Engine = vocab.EngineSGLang })
		res, err := step.Run(context.Background(), &vocab.Input{RunID: "r", StepID: "traces", Env: env,
			Window: vocab.Window{Start: time.Now().Add(-time.Hour), End: time.Now()}})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(res.Summary, `service "sglang"`) || !strings.Contains(res.Summary, "--enable-trace") {
			t.Errorf("%s: summary %q", backend, res.Summary)
		}
		q := (*queries)[0]
		if tempo && !strings.Contains(q, "name+%3D~") || !tempo && strings.Contains(q, "operation=") {
			t.Errorf("%s: searched by the exact vLLM span name: %s", backend, q)
		}
	}
}
