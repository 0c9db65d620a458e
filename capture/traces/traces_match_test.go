package traces_test

import (
	"context"
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

// TestTracesMatchKeepsTheAlertingInstance: two instances share one service.name,
// and the other one is slower; with match on service.instance.id the step returns
// the alerting instance's slowest requests, not the fleet's. Spans that carry no
// such attribute fall back to the service-wide ranking and say so; spans that
// carry it with other values give an honest empty answer.
func TestTracesMatchKeepsTheAlertingInstance(t *testing.T) {
	j := testenv.StartJaeger(t)
	base := time.Now().Add(-10 * time.Minute).Truncate(time.Second)
	mine := makeRequests(30, base, 11)
	other := makeRequests(30, base, 12)
	for i := range other {
		other[i].id = "other-" + other[i].id
		other[i].ttft += 100 // every request of the other instance is slower
	}
	bare := makeRequests(20, base, 13)
	for i := range bare {
		bare[i].id = "bare-" + bare[i].id
	}
	inst := func(svc, id string) *resource.Resource {
		return resource.NewSchemaless(attribute.String("service.name", svc), attribute.String("service.instance.id", id))
	}
	sendSpansFrom(t, j.OTLPHTTP, inst("vllm-server", "10.0.0.1:8000"), mine)
	sendSpansFrom(t, j.OTLPHTTP, inst("vllm-server", "10.0.0.2:8000"), other)
	sendSpansFrom(t, j.OTLPHTTP, resource.NewSchemaless(attribute.String("service.name", "vllm-bare")), bare)
	waitForTraces(t, j, len(mine)+len(other))

	env, _ := steptest.Env(t)
	window := vocab.Window{Start: base.Add(-time.Minute), End: time.Now()}
	run := func(t *testing.T, service, instance string) *vocab.Result {
		t.Helper()
		env.Traces = &vocab.TracesEndpoint{Endpoint: vocab.Endpoint{URL: j.QueryURL, Timeout: 10 * time.Second},
			Backend: "jaeger", Service: service}
		step := buildStep(t, "traces", func(cfg *traces.Config) {
			cfg.Limit, cfg.Fetch = 5, 20
			cfg.Match = map[string]string{"service.instance.id": instance}
		})
		res, err := step.Run(context.Background(), &vocab.Input{RunID: strings.ReplaceAll(t.Name(), "/", "-"), StepID: "slow", Env: env, Window: window,
			Alert: template.Alert{Labels: template.KV{"alertname": "VLLMHighTTFT", "instance": instance}}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	t.Run("alerting instance only", func(t *testing.T) {
		res := run(t, "vllm-server", "10.0.0.1:8000")
		want := topBy(mine, 5, func(r fakeRequest) float64 { return r.ttft })
		if got := slowestIDs(t, res); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("slowest = %v, want %v (findings %v)", got, want, res.Findings)
		}
		if res.Findings["match_applied"] != true || res.Findings["complete"] != true {
			t.Fatalf("findings = %v", res.Findings)
		}
	})
	t.Run("no span carries the key: service-wide, said so", func(t *testing.T) {
		res := run(t, "vllm-bare", "10.0.0.9:8000")
		want := topBy(bare, 5, func(r fakeRequest) float64 { return r.ttft })
		if got := slowestIDs(t, res); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("slowest = %v, want %v", got, want)
		}
		if res.Findings["match_applied"] != false || !strings.Contains(res.Summary, "no span carries service.instance.id") {
			t.Fatalf("fallback not reported: %q %v", res.Summary, res.Findings)
		}
	})
	t.Run("the key is carried but no span is this instance's", func(t *testing.T) {
		res := run(t, "vllm-server", "10.0.0.3:8000")
		if got := slowestIDs(t, res); len(got) != 0 {
			t.Fatalf("spans of other instances returned: %v", got)
		}
		if res.Findings["match_applied"] != true {
			t.Fatalf("findings = %v", res.Findings)
		}
	})
}
