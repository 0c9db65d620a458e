package traces_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/capture"
	"github.com/autocapture/autocapture/capture/traces"
	"github.com/autocapture/autocapture/internal/testkit/steptest"
	"github.com/autocapture/autocapture/vocab"
)

// fakeTraceServer answers like Tempo (/api/search) or like a Jaeger without the
// v3 API (/api/traces): the most recent matches first, cut at limit, the way
// both answer when there are more. No real Tempo runs here; the JSON is Tempo's
// documented search answer.
func fakeTraceServer(t *testing.T, reqs []fakeRequest, tempo bool) (*httptest.Server, *[]string) {
	var queries []string
	var mu sync.Mutex // the handler runs on the server's goroutines
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		queries = append(queries, r.URL.String())
		mu.Unlock()
		q := r.URL.Query()
		var minDur time.Duration
		var limit int
		var start, end time.Time
		switch {
		case tempo && r.URL.Path == "/api/search":
			limit, _ = strconv.Atoi(q.Get("limit"))
			s, _ := strconv.ParseInt(q.Get("start"), 10, 64)
			e, _ := strconv.ParseInt(q.Get("end"), 10, 64)
			start, end = time.Unix(s, 0), time.Unix(e, 0)
			if i := strings.Index(q.Get("q"), "duration >= "); i >= 0 {
				ms, _ := strconv.Atoi(strings.TrimSuffix(strings.Fields(q.Get("q")[i+12:])[0], "ms"))
				minDur = time.Duration(ms) * time.Millisecond
			}
		case !tempo && r.URL.Path == "/api/traces":
			limit, _ = strconv.Atoi(q.Get("limit"))
			s, _ := strconv.ParseInt(q.Get("start"), 10, 64)
			e, _ := strconv.ParseInt(q.Get("end"), 10, 64)
			start, end = time.UnixMicro(s), time.UnixMicro(e)
			minDur, _ = time.ParseDuration(q.Get("minDuration"))
		default:
			http.NotFound(w, r) // no /api/v3 here
			return
		}
		var hits []fakeRequest
		for i := len(reqs) - 1; i >= 0 && len(hits) < limit; i-- {
			r := reqs[i]
			d := time.Duration(r.e2e * float64(time.Second))
			if d >= minDur && !r.start.Before(start) && !r.start.After(end) {
				hits = append(hits, r)
			}
		}
		json.NewEncoder(w).Encode(traceAnswer(hits, tempo))
	}))
	t.Cleanup(srv.Close)
	return srv, &queries
}

// traceAnswer renders hits as Tempo's or Jaeger v1's JSON.
func traceAnswer(hits []fakeRequest, tempo bool) any {
	var out []any
	for _, r := range hits {
		n, _ := strconv.Atoi(strings.TrimPrefix(r.id, "req-"))
		tid := fmt.Sprintf("%032x", n+1)
		if tempo {
			attrs := []any{
				map[string]any{"key": "gen_ai.latency.time_to_first_token", "value": map[string]any{"doubleValue": r.ttft}},
				map[string]any{"key": "gen_ai.latency.time_in_queue", "value": map[string]any{"doubleValue": r.queue}},
				map[string]any{"key": "gen_ai.usage.prompt_tokens", "value": map[string]any{"intValue": "42"}},
				map[string]any{"key": "gen_ai.request.id", "value": map[string]any{"stringValue": r.id}},
			}
			out = append(out, map[string]any{"traceID": strings.TrimLeft(tid, "0"), "rootServiceName": "vllm-server",
				"spanSets": []any{map[string]any{"matched": 1, "spans": []any{map[string]any{
					"spanID": "00000000000000aa", "startTimeUnixNano": strconv.FormatInt(r.start.UnixNano(), 10),
					"durationNanos": strconv.FormatInt(int64(r.e2e*1e9), 10), "attributes": attrs}}}}})
			continue
		}
		out = append(out, map[string]any{"traceID": tid, "spans": []any{map[string]any{
			"traceID": tid, "spanID": "aa", "operationName": "llm_request", "startTime": r.start.UnixMicro(),
			"duration": int64(r.e2e * 1e6), "tags": []any{
				map[string]any{"key": "gen_ai.latency.time_to_first_token", "type": "float64", "value": r.ttft},
				map[string]any{"key": "gen_ai.latency.time_in_queue", "type": "float64", "value": r.queue},
				map[string]any{"key": "gen_ai.request.id", "type": "string", "value": r.id},
			}}}})
	}
	if tempo {
		return map[string]any{"traces": out}
	}
	return map[string]any{"data": out}
}

func TestTracesOverTruncatingBackends(t *testing.T) {
	base := time.Now().Add(-20 * time.Minute).Truncate(time.Second)
	reqs := makeRequests(300, base, 2)
	for i := range reqs { // Tempo's search takes whole seconds: spread them out
		reqs[i].start = base.Add(time.Duration(i) * 3 * time.Second)
	}
	cases := []struct {
		name, backend, alertname string
		value                    func(fakeRequest) float64
		tempo                    bool
	}{
		{"tempo ttft", "tempo", "VLLMHighTTFT", func(r fakeRequest) float64 { return r.ttft }, true},
		{"tempo queue", "tempo", "VLLMQueueDeep", func(r fakeRequest) float64 { return r.queue }, true},
		{"jaeger v1 fallback ttft", "jaeger", "VLLMHighTTFT", func(r fakeRequest) float64 { return r.ttft }, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv, queries := fakeTraceServer(t, reqs, c.tempo)
			env, _ := steptest.Env(t)
			env.Traces = &vocab.TracesEndpoint{Endpoint: vocab.Endpoint{URL: srv.URL}, Backend: c.backend, Service: "vllm-server"}
			step := buildStep(t, "traces", func(cfg *traces.Config) { cfg.Limit, cfg.Fetch = 7, 25 })
			res, err := step.Run(context.Background(), &vocab.Input{RunID: "r", StepID: "slow", Env: env,
				Window: vocab.Window{Start: base.Add(-time.Second), End: time.Now()},
				Alert:  template.Alert{Labels: template.KV{"alertname": c.alertname}}})
			if err != nil {
				t.Fatal(err)
			}
			want := topBy(reqs, 7, c.value)
			if got := slowestIDs(t, res); strings.Join(got, ",") != strings.Join(want, ",") {
				t.Fatalf("slowest = %v, want %v after %d queries", got, want, len(*queries))
			}
			t.Logf("%v searches, %v spans examined", res.Findings["searches"], res.Findings["searched"])
			if res.Findings["complete"] != true || res.Findings["searches"].(int) < 2 {
				t.Errorf("findings %v: want a complete, narrowed search", res.Findings)
			}
			if c.tempo && !strings.Contains((*queries)[0], "select%28span.gen_ai.latency.time_to_first_token") {
				t.Errorf("TraceQL does not select vLLM's attributes: %s", (*queries)[0])
			}
			tid := res.Findings["slowest"].([]any)[0].(map[string]any)["trace_id"].(string)
			if len(tid) != 32 {
				t.Errorf("trace id %q not padded to 32 hex digits", tid)
			}
		})
	}
}

func TestTracesBuildRejectsBadConfig(t *testing.T) {
	k, _ := capture.Lookup("traces")
	if k.Tier != vocab.TierTraces {
		t.Errorf("tier = %v", k.Tier)
	}
	bad := map[string]*traces.Config{
		"unknown rank":        {RankBy: "tpot"},
		"fetch below limit":   {Limit: 50, Fetch: 10},
		"negative min_dur":    {MinDuration: -time.Second},
		"negative limit only": {Limit: -1},
	}
	names := make([]string, 0, len(bad))
	for n := range bad {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if _, err := k.Build(bad[n]); err == nil {
			t.Errorf("%s: Build accepted %+v", n, bad[n])
		}
	}
}

// TestTracesWithoutBackendIsNotConfigured: tier 2 with no traces.url
// configured is not a failure of the run; the step says what is missing.
func TestTracesWithoutBackendIsNotConfigured(t *testing.T) {
	env, _ := steptest.Env(t)
	env.Traces = nil
	step := buildStep(t, "traces", func(cfg *traces.Config) {})
	_, err := step.Run(context.Background(), &vocab.Input{RunID: "r", StepID: "slow", Env: env})
	what, ok := vocab.IsNotConfigured(err)
	if !ok || what != "no trace backend (set traces.url to Jaeger or Tempo)" {
		t.Fatalf("err = %v, want not configured naming traces.url", err)
	}
}

// TestTracesEmptyAnswerNamesTheService: finding nothing says which service was
// searched, the first thing to check when vLLM exports as unknown_service.
func TestTracesEmptyAnswerNamesTheService(t *testing.T) {
	srv, _ := fakeTraceServer(t, nil, false)
	defer srv.Close()
	env, _ := steptest.Env(t)
	env.Traces = &vocab.TracesEndpoint{Endpoint: vocab.Endpoint{URL: srv.URL, Timeout: 5 * time.Second},
		Backend: "jaeger", Service: "vllm-server"}
	step := buildStep(t, "traces", func(cfg *traces.Config) {})
	res, err := step.Run(context.Background(), &vocab.Input{RunID: "r", StepID: "slow", Env: env,
		Window: vocab.Window{Start: time.Now().Add(-time.Hour), End: time.Now()}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Summary, `service "vllm-server"`) || !strings.Contains(res.Summary, "OTEL_SERVICE_NAME") {
		t.Fatalf("summary %q", res.Summary)
	}
}
