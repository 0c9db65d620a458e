package vllmsim_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/vllmsim"
)

// The alert expressions of VLLM.md, per instance; ITL and KV accept either
// metric generation.
const (
	exprTTFT  = `histogram_quantile(0.99, sum by (le, model_name, instance) (rate(vllm:time_to_first_token_seconds_bucket[5m])))`
	exprITL   = `histogram_quantile(0.99, sum by (le, model_name, instance) (rate({__name__=~"vllm:inter_token_latency_seconds_bucket|vllm:time_per_output_token_seconds_bucket"}[5m])))`
	exprQueue = `max by (model_name, instance) (max_over_time(vllm:num_requests_waiting[1m]))`
	exprKV    = `max by (model_name, instance) (max_over_time(vllm:kv_cache_usage_perc[1m]) or max_over_time(vllm:gpu_cache_usage_perc[1m]))`
	exprAbort = `sum by (model_name, instance) (rate(vllm:request_success_total{finished_reason="abort"}[5m])) / sum by (model_name, instance) (rate(vllm:request_success_total[5m]))`
	exprP50   = `histogram_quantile(0.5, sum by (le, instance) (rate(vllm:time_to_first_token_seconds_bucket[5m])))`
)

// The shipped thresholds.
var thresholds = map[string]float64{"ttft": 2, "itl": 0.2, "queue": 10, "kv": 0.95, "abort": 0.05}

// liveSim is a sim served on a loopback port and run in real time.
type liveSim struct {
	name   string
	sim    *vllmsim.Sim
	target string
}

func startLive(t *testing.T, ctx context.Context, opts vllmsim.Options) *liveSim {
	t.Helper()
	s, err := vllmsim.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	go func() { _ = s.Run(ctx) }()
	t.Cleanup(func() {
		_ = srv.Close()
		_ = s.Close(context.Background())
	})
	return &liveSim{name: opts.Scenario, sim: s, target: ln.Addr().String()}
}

// TestRealTimeAlertsAndTraces runs every scenario at once in real time,
// scraped by a real Prometheus and traced into a real Jaeger. 21 s after
// load start each scenario must have crossed exactly the shipped alerts its
// verdict expects (healthy none, well inside), and the spans in Jaeger must
// match /admin/requests.
func TestRealTimeAlertsAndTraces(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	jaeger := testenv.StartJaeger(t)
	type row struct {
		scenario    string
		legacy      bool
		fire, quiet []string
	}
	rows := []row{
		{vllmsim.ScenarioHealthy, false, nil, []string{"ttft", "itl", "queue", "kv", "abort"}},
		{vllmsim.ScenarioOverload, false, []string{"ttft", "queue"}, []string{"itl", "kv"}},
		{vllmsim.ScenarioKVPressure, true, []string{"kv"}, []string{"itl", "queue"}},
		{vllmsim.ScenarioPrefillBound, false, []string{"ttft"}, []string{"itl", "queue", "kv", "abort"}},
		{vllmsim.ScenarioDecodeBound, true, []string{"itl"}, []string{"ttft", "queue", "kv", "abort"}},
		{vllmsim.ScenarioClientAborts, false, []string{"abort"}, []string{"ttft", "itl", "queue", "kv"}},
		{vllmsim.ScenarioUnexplained, false, nil, []string{"queue", "kv", "abort"}},
	}
	sims := map[string]*liveSim{}
	var targets []string
	for _, r := range rows {
		opts := vllmsim.Options{Scenario: r.scenario, LegacyMetrics: r.legacy, Seed: 11, ServiceName: "sim-" + r.scenario}
		switch r.scenario {
		case vllmsim.ScenarioHealthy:
			opts.OTLPEndpoint, opts.OTLPProtocol = jaeger.OTLPGRPC, "grpc"
		case vllmsim.ScenarioClientAborts:
			opts.OTLPEndpoint, opts.OTLPProtocol = jaeger.OTLPHTTP, "http/protobuf"
		}
		ls := startLive(t, ctx, opts)
		sims[r.scenario] = ls
		targets = append(targets, ls.target)
	}
	begun := time.Now()
	prom := testenv.StartPrometheus(t, testenv.PrometheusOptions{ScrapeTargets: targets})
	for _, tg := range targets {
		prom.WaitUp(t, tg, 15*time.Second)
	}
	time.Sleep(time.Until(begun.Add(21 * time.Second)))

	values := map[string]map[string]float64{} // alert → instance → value
	for alert, expr := range map[string]string{"ttft": exprTTFT, "itl": exprITL, "queue": exprQueue, "kv": exprKV, "abort": exprAbort} {
		values[alert] = map[string]float64{}
		for _, s := range prom.Query(t, expr) {
			values[alert][s.Labels["instance"]] = s.Value
		}
	}
	for _, r := range rows {
		inst := sims[r.scenario].target
		v := func(a string) float64 { return values[a][inst] }
		t.Logf("%-13s p99 TTFT %6.3f  p99 ITL %.3f  queue max %5.0f  KV max %.2f  abort %.2f",
			r.scenario, v("ttft"), v("itl"), v("queue"), v("kv"), v("abort"))
		for _, a := range r.fire {
			if !(v(a) > thresholds[a]) {
				t.Errorf("%s: alert %s did not fire within 21 s: %v (threshold %v)", r.scenario, a, v(a), thresholds[a])
			}
		}
		for _, a := range r.quiet {
			if v(a) > thresholds[a] {
				t.Errorf("%s: alert %s fired: %v (threshold %v)", r.scenario, a, v(a), thresholds[a])
			}
		}
		if r.scenario == vllmsim.ScenarioUnexplained && !(v("ttft") > thresholds["ttft"] || v("itl") > thresholds["itl"]) {
			t.Errorf("unexplained: neither TTFT %v nor ITL %v crossed", v("ttft"), v("itl"))
		}
		if r.scenario == vllmsim.ScenarioHealthy && (v("ttft") > 1 || v("itl") > 0.12 || v("queue") > 5 || v("kv") > 0.5 || v("abort") > 0) {
			t.Errorf("healthy is not well inside the thresholds")
		}
		for a, x := range map[string]float64{"ttft": v("ttft"), "itl": v("itl")} {
			if math.IsNaN(x) || x <= 0 || x > 2560 {
				t.Errorf("%s: histogram_quantile for %s is %v", r.scenario, a, x)
			}
		}
	}
	checkMedianAgainstRecords(t, prom, sims[vllmsim.ScenarioHealthy])
	checkSpans(t, jaeger, sims[vllmsim.ScenarioHealthy])
	checkSpans(t, jaeger, sims[vllmsim.ScenarioClientAborts])
	checkSlowestSearch(t, jaeger, sims[vllmsim.ScenarioHealthy])
}

// checkMedianAgainstRecords: Prometheus' median TTFT from the buckets and
// the exact median of the finished requests fall in neighbouring buckets.
func checkMedianAgainstRecords(t *testing.T, prom *testenv.Prometheus, ls *liveSim) {
	t.Helper()
	var est float64
	for _, s := range prom.Query(t, exprP50) {
		if s.Labels["instance"] == ls.target {
			est = s.Value
		}
	}
	var ttfts []float64
	for _, r := range ls.sim.Requests() {
		if r.TTFT > 0 {
			ttfts = append(ttfts, r.TTFT)
		}
	}
	sort.Float64s(ttfts)
	exact := ttfts[len(ttfts)/2]
	bounds := []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5}
	bucket := func(x float64) int { return sort.SearchFloat64s(bounds, x) }
	if d := bucket(est) - bucket(exact); d < -1 || d > 1 {
		t.Errorf("median TTFT: Prometheus %.3f s, the requests %.3f s", est, exact)
	}
}

// checkSpans: every llm_request span Jaeger holds for the sim matches the
// finished request with its trace id.
func checkSpans(t *testing.T, j *testenv.Jaeger, ls *liveSim) {
	t.Helper()
	service := "sim-" + ls.name
	byTrace := map[string]vllmsim.FinishedRequest{}
	var traces []testenv.JaegerTrace
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(300 * time.Millisecond) {
		reqs := ls.sim.Requests()
		for _, r := range reqs {
			byTrace[r.TraceID] = r
		}
		traces = j.FindTraces(t, service)
		if len(traces) >= min(len(reqs)*8/10, 90) && len(traces) > 0 || time.Now().After(deadline) {
			t.Logf("%s: %d traces in Jaeger, %d finished requests", service, len(traces), len(reqs))
			break
		}
	}
	if len(traces) < 10 {
		t.Fatalf("%s: only %d traces reached Jaeger", service, len(traces))
	}
	for _, tr := range traces {
		r, ok := byTrace[tr.TraceID]
		if !ok || len(tr.Spans) != 1 {
			t.Errorf("%s: trace %s (%d spans) is not a finished request", service, tr.TraceID, len(tr.Spans))
			continue
		}
		sp := tr.Spans[0]
		tags := map[string]any{}
		for _, tag := range sp.Tags {
			tags[tag.Key] = tag.Value
		}
		if sp.OperationName != "llm_request" || sp.SpanID != r.SpanID || tags["gen_ai.request.id"] != r.ID ||
			sp.StartTime != r.Arrival.UnixMicro() || math.Abs(float64(sp.Duration)-r.E2E*1e6) > 2 ||
			tags["gen_ai.latency.time_to_first_token"] != r.TTFT || tags["gen_ai.latency.e2e"] != r.E2E {
			t.Errorf("%s: span %+v does not match request %+v", service, sp, r)
		}
	}
}

// checkSlowestSearch: Jaeger's minDuration search, the way the daemon finds
// "the slowest requests", returns exactly the slowest finished requests.
func checkSlowestSearch(t *testing.T, j *testenv.Jaeger, ls *liveSim) {
	t.Helper()
	reqs := ls.sim.Requests()
	slices.SortFunc(reqs, func(a, b vllmsim.FinishedRequest) int { return cmp.Compare(b.E2E, a.E2E) })
	minDur := int64(reqs[4].E2E*1e6) - 1 // µs: the five slowest, give or take rounding
	u := fmt.Sprintf("%s/api/traces?service=sim-%s&operation=llm_request&lookback=1h&limit=100&minDuration=%dus",
		j.QueryURL, ls.name, minDur)
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Data []testenv.JaegerTrace `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	got := map[string]bool{}
	for _, tr := range body.Data {
		got[tr.TraceID] = true
	}
	slowest := map[string]bool{}
	for _, r := range reqs {
		if int64(r.E2E*1e6) < minDur {
			continue
		}
		slowest[r.TraceID] = true
		// A span finished in the last moments may still be in a batch.
		if !got[r.TraceID] && r.Finished.Before(time.Now().Add(-2*time.Second)) {
			t.Errorf("minDuration search %s misses request %s (e2e %.3f s)", u, r.ID, r.E2E)
		}
	}
	for id := range got {
		if !slowest[id] {
			t.Errorf("minDuration search %s returned trace %s, not among the slowest", u, id)
		}
	}
	if len(got) < 4 {
		t.Errorf("minDuration search found %d of the 5 slowest", len(got))
	}
}

// TestPrometheusSelectsPythonLabels: a real Prometheus (2.42, which stores
// le as the target wrote it) scraping the sim answers the selectors users
// write against real vLLM, le="1.0" and le="2560.0", and holds no
// bare-integer le at all; the sim started healthy and shifted to overload
// on its own (--shift-after), which the queue shows.
func TestPrometheusSelectsPythonLabels(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ls := startLive(t, ctx, vllmsim.Options{Scenario: vllmsim.ScenarioOverload, ShiftAfter: 3 * time.Second, Seed: 12})
	prom := testenv.StartPrometheus(t, testenv.PrometheusOptions{ScrapeTargets: []string{ls.target}})
	prom.WaitUp(t, ls.target, 15*time.Second)
	want := map[string]func([]testenv.Sample) bool{
		`vllm:time_to_first_token_seconds_bucket{le="1.0"}`:     func(s []testenv.Sample) bool { return len(s) == 1 && s[0].Value > 0 },
		`vllm:time_to_first_token_seconds_bucket{le="2560.0"}`:  func(s []testenv.Sample) bool { return len(s) == 1 && s[0].Value > 0 },
		`vllm:request_queue_time_seconds_bucket{le="+Inf"}`:     func(s []testenv.Sample) bool { return len(s) == 1 },
		`count({__name__=~"vllm:.+_bucket", le=~"[0-9]+"})`:     func(s []testenv.Sample) bool { return len(s) == 0 },
		`count({__name__=~"vllm:.+_bucket", le=~"[0-9]+\\.0"})`: func(s []testenv.Sample) bool { return len(s) == 1 && s[0].Value >= 100 },
		`max_over_time(vllm:num_requests_waiting[1m]) > 10`:     func(s []testenv.Sample) bool { return len(s) == 1 },
	}
	if !awaitQueries(t, prom, want, 15*time.Second) {
		return
	}
	if st := ls.sim.State(); st.Scenario != vllmsim.ScenarioOverload || st.Previous != vllmsim.ScenarioHealthy || st.Pending != nil {
		t.Errorf("state after --shift-after: %+v", st)
	}
}

// awaitQueries polls Prometheus until every query's check holds, or fails
// the test with each query that does not once within passes; it says
// whether they all held.
func awaitQueries(t *testing.T, prom *testenv.Prometheus, want map[string]func([]testenv.Sample) bool, within time.Duration) bool {
	t.Helper()
	var got map[string][]testenv.Sample
	for deadline := time.Now().Add(within); ; time.Sleep(500 * time.Millisecond) {
		got = map[string][]testenv.Sample{}
		ok := true
		for q, check := range want {
			got[q] = prom.Query(t, q)
			ok = ok && check(got[q])
		}
		if ok {
			return true
		}
		if time.Now().After(deadline) {
			for q, check := range want {
				if !check(got[q]) {
					t.Errorf("%s: %+v", q, got[q])
				}
			}
			return false
		}
	}
}
