package testenv

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Jaeger is a running Jaeger v2 (all-in-one, in-memory storage) started by
// StartJaeger.
type Jaeger struct {
	// QueryURL is the query API and UI base URL, http://127.0.0.1:PORT.
	QueryURL string
	// OTLPHTTP is the OTLP/HTTP receiver's host:port.
	OTLPHTTP string
	// OTLPGRPC is the OTLP/gRPC receiver's host:port.
	OTLPGRPC string
	// HealthURL answers 200 while Jaeger is healthy.
	HealthURL string
	// Proc is the server process.
	Proc *Process
}

// jaegerConfig is the collector-style configuration: OTLP in, a 100 ms
// batch, memory storage, the query API out, and nothing on a fixed port:
// its own metrics are off (they would listen on :8888) and so is the query
// service's self-tracing (it would send to localhost:4317).
const jaegerConfig = `service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: info
extensions:
  healthcheckv2:
    use_v2: true
    http:
      endpoint: 127.0.0.1:%[1]d
      status:
        enabled: true
        path: /status
  jaeger_query:
    # On by default in v2: it would export its own spans to localhost:4317
    # (maybe another test's receiver) and hang 10s on shutdown retrying.
    enable_tracing: false
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:%[2]d
    grpc:
      endpoint: 127.0.0.1:%[3]d
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:%[4]d
      http:
        endpoint: 127.0.0.1:%[5]d
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`

// StartJaeger starts the Jaeger v2 binary built by scripts/install-tools.sh
// with in-memory storage, OTLP receivers and the query API on free
// 127.0.0.1 ports, and waits until its health check passes.
func StartJaeger(t testing.TB) *Jaeger {
	t.Helper()
	bin := Tool(t, "jaeger")
	dir := t.TempDir()
	j := &Jaeger{}
	j.Proc = startServer(t, "jaeger", 60*time.Second, func() (*Process, string) {
		health, query, queryGRPC, otlpGRPC, otlpHTTP := FreePort(t), FreePort(t), FreePort(t), FreePort(t), FreePort(t)
		cfgPath := filepath.Join(dir, "jaeger.yaml")
		cfg := fmt.Sprintf(jaegerConfig, health, query, queryGRPC, otlpGRPC, otlpHTTP)
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		j.QueryURL = fmt.Sprintf("http://127.0.0.1:%d", query)
		j.OTLPHTTP = fmt.Sprintf("127.0.0.1:%d", otlpHTTP)
		j.OTLPGRPC = fmt.Sprintf("127.0.0.1:%d", otlpGRPC)
		j.HealthURL = fmt.Sprintf("http://127.0.0.1:%d/status", health)
		return StartProcess(t, "jaeger", exec.Command(bin, "--config", cfgPath)), j.HealthURL
	})
	return j
}

// JaegerTrace is one trace as the query API (/api/traces) returns it.
type JaegerTrace struct {
	// TraceID is 32 lowercase hex digits, as TraceID.String() prints it.
	TraceID string `json:"traceID"`
	// Spans are the trace's spans in no promised order.
	Spans []JaegerSpan `json:"spans"`
}

// JaegerSpan is one span of a JaegerTrace; times are in microseconds.
type JaegerSpan struct {
	// TraceID is the trace's id in hex.
	TraceID string `json:"traceID"`
	// SpanID is the span's id in hex.
	SpanID string `json:"spanID"`
	// OperationName is the span name.
	OperationName string `json:"operationName"`
	// StartTime is in microseconds since the epoch.
	StartTime int64 `json:"startTime"`
	// Duration is in microseconds.
	Duration int64 `json:"duration"`
	// Tags are the span attributes (plus a few Jaeger adds, like span.kind).
	Tags []JaegerTag `json:"tags"`
}

// JaegerTag is a span attribute.
type JaegerTag struct {
	// Key is the attribute name.
	Key string `json:"key"`
	// Type is string, bool, int64, float64 or binary.
	Type string `json:"type"`
	// Value is the decoded JSON value.
	Value any `json:"value"`
}

// FindTraces returns the traces of service that Jaeger holds now (none when
// it has not seen the service yet). Poll it: spans arrive after the batch
// timeout.
func (j *Jaeger) FindTraces(t testing.TB, service string) []JaegerTrace {
	t.Helper()
	u := j.QueryURL + "/api/traces?limit=100&lookback=1h&service=" + url.QueryEscape(service)
	resp, err := http.Get(u)
	if err != nil {
		t.Fatalf("testenv: jaeger: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusNotFound {
		return nil // unknown service
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("testenv: jaeger: GET %s: %s: %.300s", u, resp.Status, body)
	}
	var r struct {
		Data []JaegerTrace `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("testenv: jaeger: GET %s: %v", u, err)
	}
	return r.Data
}
