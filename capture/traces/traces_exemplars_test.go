package traces_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/autocapture/autocapture/capture/traces"
	"github.com/autocapture/autocapture/internal/testkit/steptest"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/vocab"
)

// TestTracesUsesPrometheusExemplars: when the alert's histogram carries
// exemplars (a collector's span metrics can add them; vLLM does not), their
// traces are fetched by id and ranked too: here a trace the service search
// cannot find (another service name) is the slowest request, found only
// through the exemplar a real Prometheus stored.
func TestTracesUsesPrometheusExemplars(t *testing.T) {
	t.Parallel() // waits on real time and a Prometheus of its own
	j := testenv.StartJaeger(t)
	base := time.Now().Add(-5 * time.Minute).Truncate(time.Second)
	normal := makeRequests(10, base, 21)
	sendSpansFrom(t, j.OTLPHTTP, resource.NewSchemaless(attribute.String("service.name", "vllm-server")), normal)
	hidden := []fakeRequest{{id: "via-exemplar", start: base.Add(time.Minute), queue: 0.1, prefill: 9, decode: 1, ttft: 9.2, e2e: 10.3}}
	sendSpansFrom(t, j.OTLPHTTP, resource.NewSchemaless(attribute.String("service.name", "other-pipeline")), hidden)
	waitForTraces(t, j, len(normal))

	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/openmetrics-text; version=1.0.0; charset=utf-8")
		fmt.Fprintf(w, "# TYPE vllm:time_to_first_token_seconds histogram\n"+
			"vllm:time_to_first_token_seconds_bucket{le=\"1.0\"} 10\n"+
			"vllm:time_to_first_token_seconds_bucket{le=\"+Inf\"} 11 # {trace_id=\"%s\"} 9.2\n"+
			"vllm:time_to_first_token_seconds_count 11\n"+
			"vllm:time_to_first_token_seconds_sum 14.2\n# EOF\n", hidden[0].traceID)
	}))
	defer target.Close()
	instance := strings.TrimPrefix(target.URL, "http://")
	prom := testenv.StartPrometheus(t, testenv.PrometheusOptions{ScrapeTargets: []string{instance}, Exemplars: true})
	prom.WaitUp(t, instance, 30*time.Second)
	waitForExemplar(t, prom.URL, hidden[0].traceID)

	env, _ := steptest.Env(t)
	env.Prometheus = &vocab.Endpoint{URL: prom.URL, Timeout: 5 * time.Second}
	env.Traces = &vocab.TracesEndpoint{Endpoint: vocab.Endpoint{URL: j.QueryURL, Timeout: 10 * time.Second},
		Backend: "jaeger", Service: "vllm-server"}
	step := buildStep(t, "traces", func(cfg *traces.Config) { cfg.Limit, cfg.RankBy = 3, "ttft" })
	res, err := step.Run(context.Background(), &vocab.Input{RunID: "r", StepID: "slow", Env: env,
		Window: vocab.Window{Start: base.Add(-time.Minute), End: time.Now()},
		Alert:  template.Alert{Labels: template.KV{"alertname": "VLLMHighTTFT", "instance": instance}}})
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.Findings["exemplars"].(int); n < 1 {
		t.Fatalf("no exemplar used: %v", res.Findings)
	}
	if got := slowestIDs(t, res); len(got) == 0 || got[0] != "via-exemplar" {
		t.Fatalf("slowest %v, want the exemplar's request first", got)
	}
	// Without exemplars the search alone cannot see it.
	off := false
	step = buildStep(t, "traces", func(cfg *traces.Config) { cfg.Limit, cfg.RankBy, cfg.Exemplars = 3, "ttft", &off })
	res, err = step.Run(context.Background(), &vocab.Input{RunID: "r", StepID: "slow2", Env: env,
		Window: vocab.Window{Start: base.Add(-time.Minute), End: time.Now()},
		Alert:  template.Alert{Labels: template.KV{"alertname": "VLLMHighTTFT", "instance": instance}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range slowestIDs(t, res) {
		if id == "via-exemplar" {
			t.Fatal("found without exemplars: the test proves nothing")
		}
	}
}

// waitForExemplar polls Prometheus until it has stored the exemplar.
func waitForExemplar(t *testing.T, promURL, traceID string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(promURL + "/api/v1/query_exemplars?query=vllm:time_to_first_token_seconds_bucket")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(b), traceID) {
				return
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("Prometheus stored no exemplar with trace %s", traceID)
}
