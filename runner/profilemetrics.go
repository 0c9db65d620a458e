package runner

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/autocapture/autocapture/capture"
)

// profileMetrics are tier 3's: counters of this process, and gauges read from
// the lease table at scrape time (the same on every replica).
type profileMetrics struct {
	stopFailures prometheus.Counter
	sweeps       prometheus.Counter
	sweepActions *prometheus.CounterVec
}

var (
	descProfileLeases = prometheus.NewDesc("autocapture_profile_leases",
		"Targets held by a capture, by lease state (held, recording, stopping, stop_failed, stopped).", []string{"state"}, nil)
	descProfilePastDeadline = prometheus.NewDesc("autocapture_profile_recordings_past_deadline",
		"Captures still recording or stopping after their deadline (the sweeper stops them once their owner is gone).", nil, nil)
	descProfilePaused = prometheus.NewDesc("autocapture_profiling_paused",
		"1 while an operator has paused profiling fleet-wide.", nil, nil)
)

// profileLeaseStates are the states a lease row may hold.
var profileLeaseStates = []string{capture.LeaseHeld, capture.LeaseRecording, capture.LeaseStopping,
	capture.LeaseStopFailed, capture.LeaseStopped}

func newProfileMetrics() profileMetrics {
	m := profileMetrics{
		stopFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "autocapture_profile_stop_failures_total",
			Help: "Stops of a profile that failed or passed their timeout (by a step or the sweeper) in this process."}),
		sweeps: prometheus.NewCounter(prometheus.CounterOpts{Name: "autocapture_profile_sweeps_total",
			Help: "Profile sweeps this process ran."}),
		sweepActions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "autocapture_profile_sweep_actions_total",
			Help: "What this process's profile sweeps did: released (owner gone, nothing recording), stopped, stop_failed."},
			[]string{"action"}),
	}
	for _, a := range []string{"released", "stopped", capture.LeaseStopFailed} {
		m.sweepActions.WithLabelValues(a)
	}
	return m
}

func (m profileMetrics) collectors(s *Service) []prometheus.Collector {
	return []prometheus.Collector{m.stopFailures, m.sweeps, m.sweepActions, profileCollector{s: s}}
}

// profileCollector reads the lease table at scrape time.
type profileCollector struct{ s *Service }

func (c profileCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descProfileLeases
	ch <- descProfilePastDeadline
	ch <- descProfilePaused
}

func (c profileCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // a scrape has no context
	defer cancel()
	counts := map[string]float64{}
	for _, st := range profileLeaseStates {
		counts[st] = 0
	}
	rows, err := s.db.QueryContext(ctx, `SELECT state, COUNT(*) FROM autocapture_profile_leases GROUP BY state`)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descProfileLeases, err)
		return
	}
	for rows.Next() {
		var st string
		var n float64
		if rows.Scan(&st, &n) == nil {
			counts[st] = n
		}
	}
	rows.Close()
	for st, n := range counts {
		ch <- prometheus.MustNewConstMetric(descProfileLeases, prometheus.GaugeValue, n, st)
	}
	var past float64
	if err := s.db.QueryRowContext(ctx, s.dialect.sql(`SELECT COUNT(*) FROM autocapture_profile_leases
		WHERE state IN ($1, $2) AND deadline < {now}`), capture.LeaseRecording, capture.LeaseStopping).Scan(&past); err != nil {
		ch <- prometheus.NewInvalidMetric(descProfilePastDeadline, err)
	} else {
		ch <- prometheus.MustNewConstMetric(descProfilePastDeadline, prometheus.GaugeValue, past)
	}
	if p, err := s.readPause(ctx, s.db); err != nil {
		ch <- prometheus.NewInvalidMetric(descProfilePaused, err)
	} else {
		v := 0.0
		if p.paused {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descProfilePaused, prometheus.GaugeValue, v)
	}
}
