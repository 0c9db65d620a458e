package handlers

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// brokenCollector fails as a collector whose source is down does.
type brokenCollector struct{ d *prometheus.Desc }

func (b brokenCollector) Describe(ch chan<- *prometheus.Desc) { ch <- b.d }
func (b brokenCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.NewInvalidMetric(b.d, errors.New("store unreachable"))
}

// TestMetricsSurviveABrokenCollector: one collector that cannot read its
// source leaves the rest of /metrics served (200), the failure logged and
// counted; with promhttp's default the whole scrape answered 500, the
// store-down gauge with it.
func TestMetricsSurviveABrokenCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	up := prometheus.NewGauge(prometheus.GaugeOpts{Name: "autocapture_runs_store_up", Help: "up"})
	reg.MustRegister(up, brokenCollector{prometheus.NewDesc("autocapture_broken", "broken", nil, nil)})
	core, logs := observer.New(zap.WarnLevel)
	s, err := New(Options{Runs: newFakeRuns(), Registry: reg, Log: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body, _ := io.ReadAll(w.Body)
	if w.Code != http.StatusOK || !strings.Contains(string(body), "autocapture_runs_store_up 0") {
		t.Fatalf("GET /metrics = %d, want 200 with the store gauge:\n%.500s", w.Code, body)
	}
	if strings.Contains(string(body), "autocapture_broken") {
		t.Errorf("the broken collector's series was served")
	}
	if logs.FilterMessageSnippet("could not be gathered").Len() == 0 {
		t.Errorf("the failure was not logged: %v", logs.All())
	}
	w = httptest.NewRecorder()
	s.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if body, _ := io.ReadAll(w.Body); !strings.Contains(string(body), `promhttp_metric_handler_errors_total{cause="gathering"} 1`) {
		t.Errorf("the failure was not counted:\n%s", body)
	}
}
