package handlers

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/autocapture/autocapture/runner/runs"
)

// Metrics are the HTTP surface's own series. The run service registers its own
// (runs by status, queue depth, run duration) on the same registry, and the
// playbook reloader its autocapture_config_last_reload_* gauges.
type Metrics struct {
	webhooks   *prometheus.CounterVec
	ackSeconds prometheus.Histogram
	alerts     *prometheus.CounterVec
	rejected   *prometheus.CounterVec
	// linkRefusals counts link tokens refused, by route and reason.
	linkRefusals *prometheus.CounterVec
}

// NewMetrics creates the webhook and reload metrics and registers them on reg.
// Every outcome and rejection reason starts at zero, so rates work from the start.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		webhooks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "autocapture_webhooks_total",
			Help: "Alertmanager webhook requests answered, by HTTP status code.",
		}, []string{"code"}),
		ackSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "autocapture_webhook_duration_seconds",
			Help:    "Time from a webhook request's arrival to its answer.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		alerts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "autocapture_alerts_total",
			Help: "Alerts received by the webhook, by outcome (accepted, deduplicated, resolved, resolved_unknown, rejected).",
		}, []string{"outcome"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "autocapture_alerts_rejected_total",
			Help: "Alerts refused on their own (the rest of their group went ahead), by reason.",
		}, []string{"reason"}),
		linkRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "autocapture_link_refusals_total",
			Help: "Link tokens refused, by route (page: a run page's link, artifact: an artifact's) and reason (expired, bad_signature: altered, for another run, key or scope, or another link key; malformed).",
		}, []string{"route", "reason"}),
	}
	for _, c := range []prometheus.Collector{m.webhooks, m.ackSeconds, m.alerts, m.rejected, m.linkRefusals} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	for _, o := range append(slices.Clone(runs.Outcomes), OutcomeRejected) {
		m.alerts.WithLabelValues(string(o))
	}
	for _, r := range RejectReasons {
		m.rejected.WithLabelValues(r)
	}
	for _, route := range []string{"page", "artifact"} {
		for _, r := range []string{reasonExpired, reasonBadSignature, reasonMalformed} {
			m.linkRefusals.WithLabelValues(route, r)
		}
	}
	return m, nil
}

// countWebhook counts each webhook by the code it was answered with (401 and 413
// included) and times the answer.
func (s *Server) countWebhook(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		timer := prometheus.NewTimer(s.metrics.ackSeconds)
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		timer.ObserveDuration()
		s.metrics.webhooks.WithLabelValues(strconv.Itoa(sw.status())).Inc()
	})
}
