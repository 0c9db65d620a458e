package chart_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/capture/chart"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/vocab"
)

// TestChartAgainstRealPrometheus scrapes a target whose queue depth climbs by
// one per scrape on two engines, charts it, and checks the PNG and findings.
func TestChartAgainstRealPrometheus(t *testing.T) {
	t.Parallel() // waits on real time and a Prometheus of its own
	var scrapes atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := scrapes.Add(1)
		fmt.Fprintf(w, "# TYPE vllm:num_requests_waiting gauge\n"+
			"vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} %d\n"+
			"vllm:num_requests_waiting{engine=\"1\",model_name=\"m\"} %d\n", n, n/2)
	}))
	defer target.Close()
	inst := strings.TrimPrefix(target.URL, "http://")
	prom := testenv.StartPrometheus(t, testenv.PrometheusOptions{ScrapeTargets: []string{inst}})
	prom.WaitUp(t, inst, 30*time.Second)
	for deadline := time.Now().Add(20 * time.Second); scrapes.Load() < 6; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("only %d scrapes", scrapes.Load())
		}
	}
	env, st := testEnv(t)
	env.Prometheus = &vocab.Endpoint{URL: prom.URL}
	now := time.Now()
	threshold := 3.0
	cases := []struct {
		name       string
		query      string
		series     int
		above      any
		wantReason vocab.Reason
	}{
		{"two engines", `vllm:num_requests_waiting{instance="` + inst + `"}`, 2, true, ""},
		{"no data", `vllm:num_requests_waiting{instance="elsewhere:1"}`, 0, nil, ""},
		{"bad promql", `sum(`, 0, nil, vocab.ReasonBadConfig},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			step := buildStep(t, "chart", func(cfg *chart.Config) {
				cfg.Title, cfg.Unit, cfg.Query, cfg.Threshold = "Queue depth", "requests", c.query, &threshold
			})
			// One store for every case: each case is its own run (a key is
			// never overwritten).
			run := strings.ReplaceAll(c.name, " ", "-")
			in := &vocab.Input{RunID: run, StepID: "queue-chart", Env: env,
				Window: vocab.Window{Start: now.Add(-40 * time.Second), End: now},
				Alert:  template.Alert{StartsAt: now.Add(-4 * time.Second), Labels: template.KV{"instance": inst}}}
			res, err := step.Run(context.Background(), in)
			if vocab.Classify(err) != c.wantReason {
				t.Fatalf("reason %q (%v), want %q", vocab.Classify(err), err, c.wantReason)
			}
			if err != nil {
				return
			}
			if res.Findings["series"] != c.series || res.Findings["above_threshold"] != c.above {
				t.Fatalf("findings = %v", res.Findings)
			}
			a := res.Artifacts[0]
			if !strings.HasSuffix(a.Key, "/"+run+"/_~e3b0c442/queue-chart/chart.png") || a.ContentType != "image/png" {
				t.Fatalf("artifact = %+v", a)
			}
			body := readArtifact(t, st, a.Key)
			img, err := png.Decode(bytes.NewReader([]byte(body)))
			if err != nil {
				t.Fatalf("artifact is not a PNG: %v", err)
			}
			if b := img.Bounds(); b.Dx() != 768 || b.Dy() != 384 {
				t.Fatalf("PNG is %dx%d, want 768x384", b.Dx(), b.Dy())
			}
			if dir := os.Getenv("CHART_OUT"); dir != "" { // for looking at it
				os.WriteFile(dir+"/"+strings.ReplaceAll(c.name, " ", "_")+".png", []byte(body), 0o644)
			}
		})
	}
}

// TestChartFailureIsOneReadableLine: a failed chart names itself by title and
// its reason; it quotes its query only when the query is what is wrong.
func TestChartFailureIsOneReadableLine(t *testing.T) {
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"status":"error","errorType":"bad_data","error":"1:5: parse error: unexpected end of input"}`)
	}))
	defer bad.Close()
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	cases := []struct {
		name, url, reason string
		wantQuery         bool
	}{
		{"Prometheus down", deadURL, "unreachable", false},
		{"bad query", bad.URL, "bad-config", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env, _ := testEnv(t)
			env.Prometheus = &vocab.Endpoint{URL: c.url, Timeout: 5 * time.Second}
			step := buildStep(t, "chart", func(cfg *chart.Config) {
				cfg.Title, cfg.Query = "p99 time to first token", "histogram_quantile(0.99, sum by (le) (rate(x_bucket[1m])))"
			})
			now := time.Now()
			_, err := step.Run(context.Background(), &vocab.Input{RunID: "r", StepID: "c", Env: env,
				Window: vocab.Window{Start: now.Add(-time.Minute), End: now}})
			if err == nil {
				t.Fatal("chart succeeded")
			}
			msg := err.Error()
			if got := string(vocab.Classify(err)); got != c.reason {
				t.Errorf("reason %s, want %s (%s)", got, c.reason, msg)
			}
			if !strings.Contains(msg, `chart "p99 time to first token"`) || strings.Contains(msg, "\n") {
				t.Errorf("not one line naming the chart: %q", msg)
			}
			if strings.Contains(msg, "histogram_quantile") != c.wantQuery {
				t.Errorf("query quoted = %v, want %v: %q", !c.wantQuery, c.wantQuery, msg)
			}
		})
	}
}

// TestChartSkipsNaNPoints: idle minutes make histogram_quantile NaN; the chart
// treats them as gaps, and its result stays storable as JSON.
func TestChartSkipsNaNPoints(t *testing.T) {
	prom := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"instance":"a"},`+
			`"values":[[1800000000,"NaN"],[1800000015,"1.5"],[1800000030,"NaN"],[1800000045,"+Inf"]]}]}}`)
	}))
	defer prom.Close()
	env, _ := testEnv(t)
	env.Prometheus = &vocab.Endpoint{URL: prom.URL, Timeout: 5 * time.Second}
	step := buildStep(t, "chart", func(cfg *chart.Config) { cfg.Title, cfg.Query = "p99 TTFT", "q" })
	start := time.Unix(1800000000, 0)
	res, err := step.Run(context.Background(), &vocab.Input{RunID: "r", StepID: "c", Env: env,
		Window: vocab.Window{Start: start, End: start.Add(time.Minute)}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Findings["max"] != 1.5 || res.Findings["points"] != 1 {
		t.Fatalf("findings %v", res.Findings)
	}
	if _, err := json.Marshal(res); err != nil {
		t.Fatalf("result cannot be stored: %v", err)
	}
}
