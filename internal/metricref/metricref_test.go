package metricref

import (
	"reflect"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// constCollector exports its gauge only when emit is set, as the daemon's
// scrape-time collectors do when the store does not answer.
type constCollector struct {
	desc *prometheus.Desc
	emit bool
}

func (c constCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c constCollector) Collect(ch chan<- prometheus.Metric) {
	if c.emit {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, 1, "a")
	}
}

func TestFromCollectors(t *testing.T) {
	backlog := prometheus.NewDesc("x_backlog", "Waiting | queued.", []string{"sink"}, nil)
	cs := []prometheus.Collector{
		prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "Things."}, []string{"kind", "status"}),
		prometheus.NewHistogram(prometheus.HistogramOpts{Name: "x_seconds", Help: "How long."}),
		prometheus.NewGauge(prometheus.GaugeOpts{Name: "go_other", Help: "Not ours."}),
		constCollector{desc: backlog, emit: true},
	}
	got, err := FromCollectors("x_", cs)
	if err != nil {
		t.Fatal(err)
	}
	want := []Metric{
		{Name: "x_backlog", Type: "gauge", Labels: []string{"sink"}, Help: "Waiting | queued."},
		{Name: "x_seconds", Type: "histogram", Help: "How long."},
		{Name: "x_total", Type: "counter", Labels: []string{"kind", "status"}, Help: "Things."},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	md := string(Markdown("# M\n", []Section{{Title: "Daemon", Metrics: got}}))
	for _, row := range []string{
		"| `x_backlog` | gauge | `sink` | Waiting \\| queued. |",
		"| `x_total` | counter | `kind`, `status` | Things. |",
		"| `x_seconds` | histogram | — | How long. |",
	} {
		if !strings.Contains(md, row+"\n") {
			t.Errorf("no row %q in\n%s", row, md)
		}
	}
}

func TestFromCollectorsRefusesWhatItCannotTell(t *testing.T) {
	silent := constCollector{desc: prometheus.NewDesc("x_silent", "No series.", nil, nil)}
	if _, err := FromCollectors("x_", []prometheus.Collector{silent}); err == nil || !strings.Contains(err.Error(), "x_silent") {
		t.Errorf("a collector with no series: %v, want an error naming x_silent", err)
	}
	a := prometheus.NewCounter(prometheus.CounterOpts{Name: "x_total", Help: "A."})
	b := prometheus.NewCounter(prometheus.CounterOpts{Name: "x_total", Help: "B."})
	if _, err := FromCollectors("x_", []prometheus.Collector{a, b}); err == nil || !strings.Contains(err.Error(), "x_total") {
		t.Errorf("two collectors of one name: %v, want an error naming x_total", err)
	}
}

func TestFromGatherer(t *testing.T) {
	reg := prometheus.NewRegistry()
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_errors_total", Help: "Errors."}, []string{"reason"})
	v.WithLabelValues("cut")
	reg.MustRegister(v, prometheus.NewGauge(prometheus.GaugeOpts{Name: "x_up", Help: "Up."}))
	got, err := FromGatherer("x_", reg)
	if err != nil {
		t.Fatal(err)
	}
	want := []Metric{
		{Name: "x_errors_total", Type: "counter", Labels: []string{"reason"}, Help: "Errors."},
		{Name: "x_up", Type: "gauge", Help: "Up."},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}
