package traces

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/autocapture/autocapture/capture/internal/stepkit"
	"github.com/autocapture/autocapture/vocab"
)

// maxTraceAnswer caps a backend answer read into memory (fetch=200 spans is ~1 MB).
const maxTraceAnswer = 64 << 20

// jaeger searches Jaeger: the /api/v3 query API first, /api/traces when the
// server has no v3 routes (older Jaeger).
type jaeger struct {
	base   string
	client *http.Client
}

func newJaeger(tr *vocab.TracesEndpoint) *jaeger {
	return &jaeger{base: strings.TrimSuffix(tr.URL, "/"), client: stepkit.HTTPClientOf(&tr.Endpoint)}
}

// Link is the trace's page in the Jaeger UI.
func (j *jaeger) Link(traceID string) string { return j.base + "/trace/" + traceID }

// Granularity: Jaeger's v1 API takes microseconds.
func (j *jaeger) Granularity() time.Duration { return time.Microsecond }

// Search asks /api/v3/traces; a 404 that is not Jaeger's own "No traces found"
// answer means no v3 API, and /api/traces is asked instead.
func (j *jaeger) Search(ctx context.Context, q SpanQuery) ([]Span, error) {
	v := url.Values{}
	v.Set("query.service_name", q.Service)
	if q.Operation != "" {
		v.Set("query.operation_name", q.Operation)
	}
	v.Set("query.start_time_min", q.Start.UTC().Format(time.RFC3339Nano))
	v.Set("query.start_time_max", q.End.UTC().Format(time.RFC3339Nano))
	v.Set("query.num_traces", strconv.Itoa(q.Limit))
	if q.MinDuration > 0 {
		v.Set("query.duration_min", q.MinDuration.String())
	}
	body, status, err := j.get(ctx, "/api/v3/traces?"+v.Encode())
	if err != nil {
		return nil, err
	}
	switch {
	case status == http.StatusOK:
		return parseOTLPAnswer(body, q.wants)
	case status == http.StatusNotFound && isJaegerNoTraces(body):
		return nil, nil
	case status == http.StatusNotFound:
		return j.searchV1(ctx, q)
	}
	return nil, stepkit.HTTPStatusError("jaeger "+j.base+"/api/v3/traces", status, string(body))
}

// Get reads one trace by id.
func (j *jaeger) Get(ctx context.Context, traceID string) ([]Span, error) {
	body, status, err := j.get(ctx, "/api/v3/traces/"+url.PathEscape(traceID))
	if err != nil {
		return nil, err
	}
	if status == http.StatusNotFound && isJaegerNoTraces(body) {
		return nil, nil
	}
	if status != http.StatusOK {
		return nil, stepkit.HTTPStatusError("jaeger "+j.base+"/api/v3/traces/"+traceID, status, string(body))
	}
	return parseOTLPAnswer(body, func(string) bool { return true })
}

// searchV1 is the /api/traces search of Jaeger's internal (v1) query API.
func (j *jaeger) searchV1(ctx context.Context, q SpanQuery) ([]Span, error) {
	v := url.Values{}
	v.Set("service", q.Service)
	if q.Operation != "" {
		v.Set("operation", q.Operation)
	}
	v.Set("start", strconv.FormatInt(q.Start.UnixMicro(), 10))
	v.Set("end", strconv.FormatInt(q.End.UnixMicro(), 10))
	v.Set("limit", strconv.Itoa(q.Limit))
	if q.MinDuration > 0 {
		v.Set("minDuration", q.MinDuration.String())
	}
	body, status, err := j.get(ctx, "/api/traces?"+v.Encode())
	if err != nil {
		return nil, err
	}
	if status == http.StatusNotFound { // a service Jaeger has not seen
		return nil, nil
	}
	if status != http.StatusOK {
		return nil, stepkit.HTTPStatusError("jaeger "+j.base+"/api/traces", status, string(body))
	}
	var ans struct {
		Data []struct {
			Spans []struct {
				TraceID       string      `json:"traceID"`
				SpanID        string      `json:"spanID"`
				OperationName string      `json:"operationName"`
				StartTime     int64       `json:"startTime"` // µs
				Duration      int64       `json:"duration"`  // µs
				ProcessID     string      `json:"processID"`
				Tags          []jaegerTag `json:"tags"`
			} `json:"spans"`
			// Processes carry the resource attributes (service.instance.id …).
			Processes map[string]struct {
				Tags []jaegerTag `json:"tags"`
			} `json:"processes"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		return nil, vocab.Errorf(vocab.ReasonUpstream5xx, "jaeger %s/api/traces: decode: %w", j.base, err)
	}
	var out []Span
	for _, tr := range ans.Data {
		for _, s := range tr.Spans {
			if !q.wants(s.OperationName) {
				continue
			}
			attrs := make(map[string]any, len(s.Tags))
			for _, tag := range tr.Processes[s.ProcessID].Tags {
				attrs[tag.Key] = tag.Value
			}
			for _, tag := range s.Tags {
				attrs[tag.Key] = tag.Value
			}
			out = append(out, newSpan(s.TraceID, s.SpanID, s.OperationName,
				time.UnixMicro(s.StartTime), time.Duration(s.Duration)*time.Microsecond, attrs))
		}
	}
	return out, nil
}

// get is one GET below base; transport failures are classified.
func (j *jaeger) get(ctx context.Context, pathQuery string) ([]byte, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.base+pathQuery, nil)
	if err != nil {
		return nil, 0, vocab.Errorf(vocab.ReasonBadConfig, "jaeger %s: %w", j.base, err)
	}
	resp, err := j.client.Do(req)
	if err != nil {
		return nil, 0, &vocab.Error{Reason: vocab.Classify(err), Err: fmt.Errorf("jaeger %s: %w", j.base, err)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxTraceAnswer))
	if err != nil {
		return nil, 0, &vocab.Error{Reason: vocab.Classify(err), Err: fmt.Errorf("jaeger %s: read answer: %w", j.base, err)}
	}
	return body, resp.StatusCode, nil
}

// isJaegerNoTraces recognises the v3 API's JSON error for an empty result, as
// opposed to a 404 from a server without the route.
func isJaegerNoTraces(body []byte) bool {
	var e struct {
		Error struct {
			HTTPCode int    `json:"httpCode"`
			Message  string `json:"message"`
		} `json:"error"`
	}
	return json.Unmarshal(body, &e) == nil && e.Error.HTTPCode == http.StatusNotFound
}

// jaegerTag is one tag of the v1 API's JSON.
type jaegerTag struct {
	Key   string `json:"key"`
	Value any    `json:"value"`
}

// otlpKV is an OTLP attribute in its JSON form (Jaeger v3 and Tempo).
type otlpKV struct {
	Key   string `json:"key"`
	Value struct {
		StringValue *string         `json:"stringValue"`
		IntValue    json.RawMessage `json:"intValue"` // proto3 JSON writes int64 as a string
		DoubleValue *float64        `json:"doubleValue"`
		BoolValue   *bool           `json:"boolValue"`
	} `json:"value"`
}

// value returns the attribute as a Go value.
func (kv otlpKV) value() any {
	v := kv.Value
	switch {
	case v.StringValue != nil:
		return *v.StringValue
	case v.DoubleValue != nil:
		return *v.DoubleValue
	case v.BoolValue != nil:
		return *v.BoolValue
	case len(v.IntValue) > 0:
		n, _ := strconv.ParseInt(strings.Trim(string(v.IntValue), `"`), 10, 64)
		return n
	}
	return nil
}

func otlpAttrs(kvs []otlpKV) map[string]any {
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = kv.value()
	}
	return m
}

// parseOTLPAnswer reads the v3 API's {"result": TracesData} answer.
func parseOTLPAnswer(body []byte, wants func(name string) bool) ([]Span, error) {
	var ans struct {
		Result struct {
			ResourceSpans []struct {
				Resource struct {
					Attributes []otlpKV `json:"attributes"`
				} `json:"resource"`
				ScopeSpans []struct {
					Spans []struct {
						TraceID    string          `json:"traceId"`
						SpanID     string          `json:"spanId"`
						Name       string          `json:"name"`
						Start      json.RawMessage `json:"startTimeUnixNano"`
						End        json.RawMessage `json:"endTimeUnixNano"`
						Attributes []otlpKV        `json:"attributes"`
					} `json:"spans"`
				} `json:"scopeSpans"`
			} `json:"resourceSpans"`
		} `json:"result"`
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		return nil, vocab.Errorf(vocab.ReasonUpstream5xx, "jaeger /api/v3: decode: %w", err)
	}
	var out []Span
	for _, rs := range ans.Result.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				if !wants(s.Name) {
					continue
				}
				start, end := unixNano(s.Start), unixNano(s.End)
				attrs := otlpAttrs(rs.Resource.Attributes)
				for k, v := range otlpAttrs(s.Attributes) {
					attrs[k] = v // a span's own attribute wins over its resource's
				}
				out = append(out, newSpan(otlpID(s.TraceID), otlpID(s.SpanID), s.Name,
					time.Unix(0, start), time.Duration(end-start), attrs))
			}
		}
	}
	return out, nil
}

// unixNano reads a proto3 JSON uint64: a quoted or bare number.
func unixNano(raw json.RawMessage) int64 {
	n, _ := strconv.ParseInt(strings.Trim(string(raw), `"`), 10, 64)
	return n
}

// otlpID returns a trace or span id as lower-case hex, whether the JSON carried
// hex (OTLP/JSON) or base64 (plain protobuf JSON).
func otlpID(s string) string {
	if _, err := hex.DecodeString(s); err == nil {
		return strings.ToLower(s)
	}
	if b, err := base64.StdEncoding.DecodeString(s); err == nil {
		return hex.EncodeToString(b)
	}
	return s
}
