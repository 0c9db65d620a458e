package prometheus

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/autocapture/autocapture/capture/internal/promkit"
	"github.com/autocapture/autocapture/capture/internal/stepkit"
	"github.com/autocapture/autocapture/internal/testkit/steptest"
	"github.com/autocapture/autocapture/vocab"
)

// fakeProm answers /api/v1/query and /api/v1/query_range from a table keyed by
// the PromQL text, like Prometheus' HTTP API does.
type fakeProm struct {
	mu     sync.Mutex
	ranges []url3 // start, end, step of each range query
	// barrier, when set, holds every query until that many are in flight.
	barrier *sync.WaitGroup
}

type url3 struct{ start, end, step float64 }

const promTS = steptest.PromTS

func (f *fakeProm) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	q := r.Form.Get("query")
	if f.barrier != nil {
		f.barrier.Done()
		f.barrier.Wait()
	}
	if r.URL.Path == "/api/v1/query_range" {
		num := func(k string) float64 { v, _ := strconv.ParseFloat(r.Form.Get(k), 64); return v }
		f.mu.Lock()
		f.ranges = append(f.ranges, url3{num("start"), num("end"), num("step")})
		f.mu.Unlock()
		ok(w, `{"resultType":"matrix","result":[{"metric":{"instance":"a"},"values":[[1,"1"],[2,"5"],[3,"NaN"],[4,"3"]]}]}`)
		return
	}
	switch q {
	case "scalar":
		ok(w, `{"resultType":"scalar","result":[1800000000,"3"]}`)
	case "max(queue)":
		ok(w, `{"resultType":"vector","result":[{"metric":{},"value":[1800000000,"42"]}]}`)
	case "kv":
		ok(w, `{"resultType":"vector","result":[{"metric":{"engine":"0"},"value":[1800000000,"0.5"]},{"metric":{"engine":"1"},"value":[1800000000,"0.97"]}]}`)
	case "empty":
		ok(w, `{"resultType":"vector","result":[]}`)
	case "nan":
		ok(w, `{"resultType":"vector","result":[{"metric":{},"value":[1800000000,"NaN"]}]}`)
	case "bad(":
		w.WriteHeader(400)
		io.WriteString(w, `{"status":"error","errorType":"bad_data","error":"1:5: parse error: unclosed left parenthesis"}`)
	case "heavy":
		w.WriteHeader(503)
		io.WriteString(w, `{"status":"error","errorType":"timeout","error":"query timed out in expression evaluation"}`)
	case "slow":
		select {
		case <-r.Context().Done():
		case <-time.After(time.Second):
		}
	default:
		http.Error(w, "unknown query "+q, 500)
	}
}

// ok writes a Prometheus API success answer carrying data.
func ok(w http.ResponseWriter, data string) { steptest.PromOK(w, data) }

// promInput is an Input against url with a local store and a one-hour window.
func promInput(t testing.TB, url string) *vocab.Input { return steptest.PromInput(t, url) }

func TestPrometheusFindingsSignalsAndArtifact(t *testing.T) {
	f := &fakeProm{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	step, err := New(Config{Queries: []promkit.PromQuery{
		{Name: "queue", Query: "max(queue)", Signal: vocab.SigQueueDepth},
		{Name: "kv", Query: "kv", Signal: vocab.SigKVUsage},
		{Name: "s", Query: "scalar"},
		{Name: "gone", Query: "empty", Signal: vocab.SigRunning},
		{Name: "nan", Query: "nan", Signal: vocab.SigTTFTP99},
		{Name: "hist", Query: "rate(x[1m])", Range: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	in := promInput(t, srv.URL)
	res, err := step.Run(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if res.Findings["queue"] != 42.0 || res.Findings["s"] != 3.0 || res.Findings["nan"] != nil {
		t.Fatalf("scalar-like findings: %v", res.Findings)
	}
	if kv, okKV := res.Findings["kv"].([]promkit.VectorElem); !okKV || len(kv) != 2 || kv[1].Labels["engine"] != "1" {
		t.Fatalf("labelled vector finding: %#v", res.Findings["kv"])
	}
	want := vocab.Signals{vocab.SigQueueDepth: 42, vocab.SigKVUsage: 0.97}
	if fmt.Sprint(res.Signals) != fmt.Sprint(want) {
		t.Fatalf("signals %v, want %v (vector → its largest sample; NaN and empty → none)", res.Signals, want)
	}
	if nd := res.Findings["no_data"].([]string); len(nd) != 1 || nd[0] != "gone" {
		t.Fatalf("no_data %v", nd)
	}
	hist := res.Findings["hist"].([]promkit.SeriesSummary)
	if hist[0].Points != 4 || hist[0].Max != 5.0 || hist[0].Min != 1.0 || hist[0].Last != 3.0 {
		t.Fatalf("range summary %+v", hist[0])
	}
	if len(f.ranges) != 1 || f.ranges[0].end-f.ranges[0].start != 3600 || f.ranges[0].step != 15 {
		t.Fatalf("range over the window at ≤250 points: %+v", f.ranges)
	}
	if _, err := json.Marshal(res); err != nil {
		t.Fatalf("the run JSON must carry the findings: %v", err)
	}
	if len(res.Artifacts) != 1 || !strings.HasSuffix(res.Artifacts[0].Key, "/r1/_~e3b0c442/snapshot/prometheus.json") {
		t.Fatalf("artifacts %+v", res.Artifacts)
	}
	rc, _ := in.Env.Store.Open(context.Background(), res.Artifacts[0].Key)
	body, _ := io.ReadAll(rc)
	rc.Close()
	for _, s := range []string{`"name": "kv"`, `"type": "range"`, `"step": "15s"`, `"result_type": "vector"`} {
		if !strings.Contains(string(body), s) {
			t.Errorf("artifact lacks %s", s)
		}
	}
}

func TestPrometheusKeepsResultsWhenSomeQueriesFail(t *testing.T) {
	srv := httptest.NewServer(&fakeProm{})
	defer srv.Close()
	step, _ := New(Config{Queries: []promkit.PromQuery{
		{Name: "queue", Query: "max(queue)", Signal: vocab.SigQueueDepth},
		{Name: "typo", Query: "bad("},
		{Name: "heavy", Query: "heavy"},
		{Name: "stuck", Query: "slow", Timeout: 100 * time.Millisecond},
	}})
	res, err := step.Run(context.Background(), promInput(t, srv.URL))
	if err != nil {
		t.Fatalf("one query worked, the step must not fail: %v", err)
	}
	failed := res.Findings["failed"].(map[string]string)
	for name, want := range map[string]string{
		"typo":  "bad-config: bad_data: 1:5: parse error",
		"heavy": "timeout: server_error: server error: 503: query timed out",
		"stuck": "timeout: query stuck: no answer within 100ms",
	} {
		if !strings.HasPrefix(failed[name], want) {
			t.Errorf("failed[%s] = %q, want prefix %q", name, failed[name], want)
		}
	}
	if res.Signals[vocab.SigQueueDepth] != 42 {
		t.Fatalf("the working query's signal is kept: %v", res.Signals)
	}
	if !strings.Contains(res.Summary, "3 failed (heavy timeout, stuck timeout, typo bad-config)") {
		t.Fatalf("summary %q", res.Summary)
	}
}

func TestPrometheusRunsQueriesInParallel(t *testing.T) {
	// Each query is held until all four are in flight: run one after another,
	// the first would wait for the others forever and hit its deadline.
	var all sync.WaitGroup
	all.Add(4)
	srv := httptest.NewServer(&fakeProm{barrier: &all})
	defer srv.Close()
	var qs []promkit.PromQuery
	for i := range 4 {
		qs = append(qs, promkit.PromQuery{Name: fmt.Sprintf("q%d", i), Query: "max(queue)", Timeout: 5 * time.Second})
	}
	step, _ := New(Config{Queries: qs})
	res, err := step.Run(context.Background(), promInput(t, srv.URL))
	if err != nil || res.Findings["failed"] != nil {
		t.Fatalf("err %v, failed %v", err, res.Findings["failed"])
	}
}

func TestPrometheusDownFailsTheStepInOneLine(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	step, _ := New(Config{Queries: []promkit.PromQuery{{Name: "a", Query: "up"}, {Name: "b", Query: "up"}}})
	res, err := step.Run(context.Background(), promInput(t, url))
	if vocab.Classify(err) != vocab.ReasonUnreachable || !strings.Contains(err.Error(), "all 2 queries failed") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("err = %v (%s)", err, vocab.Classify(err))
	}
	if res == nil || len(res.Findings["failed"].(map[string]string)) != 2 || len(res.Artifacts) != 1 {
		t.Fatalf("the failures are evidence too: %+v", res)
	}
}

func TestPrometheusNeverShowsCredentials(t *testing.T) {
	step, _ := New(Config{Queries: []promkit.PromQuery{{Name: "a", Query: "up"}}})
	_, err := step.Run(context.Background(), promInput(t, "http://user:hunter2@127.0.0.1:1"))
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("err = %v", err)
	}
}

func TestNewPrometheusValidates(t *testing.T) {
	for name, q := range map[string]promkit.PromQuery{
		"name with a dot":    {Name: "a.b", Query: "up"},
		"reserved name":      {Name: "failed", Query: "up"},
		"empty query":        {Name: "a", Query: " "},
		"unknown signal":     {Name: "a", Query: "up", Signal: "queue"},
		"signal on a range":  {Name: "a", Query: "up", Signal: vocab.SigKVUsage, Range: true},
		"step on an instant": {Name: "a", Query: "up", Step: time.Second},
		"negative timeout":   {Name: "a", Query: "up", Timeout: -1},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := New(Config{Queries: []promkit.PromQuery{q}}); vocab.Classify(err) != vocab.ReasonBadConfig {
				t.Fatalf("err = %v", err)
			}
		})
	}
	dup := []promkit.PromQuery{{Name: "a", Query: "up"}, {Name: "a", Query: "up"}}
	if _, err := New(Config{Queries: dup}); err == nil {
		t.Fatal("duplicate names accepted")
	}
}

func TestRangeStepKeepsPointsBounded(t *testing.T) {
	t0 := time.Unix(promTS, 0)
	for _, span := range []time.Duration{time.Minute, 15 * time.Minute, time.Hour, 6*time.Hour + 7*time.Second, 24 * time.Hour} {
		step := stepkit.RangeStep(t0, t0.Add(span))
		if step < time.Second || step%time.Second != 0 || int(span/step) > stepkit.MaxRangePoints {
			t.Errorf("span %v: step %v gives %d points", span, step, int(span/step))
		}
	}
}

// TestPrometheusTimeoutSaysItsCauseOnce: a query cut off by its deadline says
// why in one line, without the cause repeated by the HTTP client's own error.
func TestPrometheusTimeoutSaysItsCauseOnce(t *testing.T) {
	srv := httptest.NewServer(&fakeProm{})
	defer srv.Close()
	step, _ := New(Config{Queries: []promkit.PromQuery{
		{Name: "stuck", Query: "slow", Timeout: 100 * time.Millisecond},
	}})
	_, err := step.Run(context.Background(), promInput(t, srv.URL))
	if vocab.Classify(err) != vocab.ReasonTimeout {
		t.Fatalf("err %v, want a timeout", err)
	}
	if n := strings.Count(err.Error(), "no answer within 100ms"); n != 1 || strings.Contains(err.Error(), "\n") {
		t.Fatalf("cause said %d times: %q", n, err)
	}
}
