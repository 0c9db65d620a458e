package lifecycle

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// Metrics are the runs': counters on transitions in this process (the gauges
// are read from the store at scrape time, the same on every replica: see
// storeCollector). Alert intake is counted by handlers
// (autocapture_alerts_total{outcome}).
type Metrics struct {
	Finished  *prometheus.CounterVec
	Duration  *prometheus.HistogramVec
	Steps     *prometheus.CounterVec
	StepTime  *prometheus.HistogramVec
	Executing prometheus.Gauge
	Resumed   prometheus.Counter
	Abandoned *prometheus.GaugeVec

	Feedback *prometheus.CounterVec
	// Verdicts counts verdicts recorded by kind (preliminary, refined) and
	// id; Changed counts refined verdicts that differ from the preliminary
	// one the thread showed first, by the preliminary's id (every id from
	// zero, as a ratio over verdicts needs; the pair was→now is in the
	// run's verdict history).
	Verdicts *prometheus.CounterVec
	Changed  *prometheus.CounterVec
}

func newMetrics() *Metrics {
	m := &Metrics{
		Finished: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "autocapture_runs_finished_total",
			Help: "Runs this process finished, by final status."}, []string{"status"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "autocapture_run_duration_seconds",
			Help:    "From a run's first start to its end, by final status.",
			Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 1200, 2400}}, []string{"status"}),
		Steps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "autocapture_steps_total",
			Help: "Finished steps by kind and status."}, []string{"kind", "status"}),
		StepTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "autocapture_step_duration_seconds",
			Help:    "How long finished steps ran (skipped ones excluded), by kind.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 15, 30, 60, 120, 300}}, []string{"kind"}),
		Executing: prometheus.NewGauge(prometheus.GaugeOpts{Name: "autocapture_runs_executing",
			Help: "Runs this process is executing now (at most runs.max_concurrent)."}),
		Resumed: prometheus.NewCounter(prometheus.CounterOpts{Name: "autocapture_runs_resumed_total",
			Help: "Abandoned runs this process's reaper put back in the queue."}),
		Abandoned: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "autocapture_steps_abandoned",
			Help: "Steps this process stopped waiting for (they ignored their deadline) whose goroutine has not returned yet."},
			[]string{"kind"}),
		Feedback: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "autocapture_verdict_feedback_total",
			Help: "Readers' answers to a run's verdict this process recorded, by verdict and whether they said it was right " +
				"(correct=\"true\"); a reader who changes their answer counts again, under the new one."},
			[]string{"verdict", "correct"}),
		Verdicts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "autocapture_verdicts_total",
			Help: "Verdicts this process recorded in a run's history, by kind (preliminary: the PromQL snapshot alone; " +
				"refined: the triage step's; profiled: refined by a profile's finding) and verdict id."}, []string{"kind", "verdict"}),
		Changed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "autocapture_verdict_changes_total",
			Help: "Refined verdicts this process recorded that differ from the preliminary one the thread showed first " +
				"(a \"was X, now Y\" reply), by the preliminary's id: which early answers to trust less."}, []string{"was"}),
	}
	for _, v := range vocab.Verdicts { // every series from zero, so ratios work from the start
		m.Feedback.WithLabelValues(v, "true")
		m.Feedback.WithLabelValues(v, "false")
		m.Verdicts.WithLabelValues(runs.VerdictPreliminary, v)
		m.Verdicts.WithLabelValues(runs.VerdictRefined, v)
		m.Verdicts.WithLabelValues(runs.VerdictProfiled, v)
		m.Changed.WithLabelValues(v)
	}
	// Every final status and every sink's failure reasons from zero too: rate()
	// and increase() miss the first increment of a series that appears with it,
	// and the self-monitoring alerts (deploy/prometheus/autocapture-alerts.yml)
	// fire on exactly those.
	for _, st := range vocab.RunStatuses {
		if st != vocab.StatusQueued && st != vocab.StatusRunning {
			m.Finished.WithLabelValues(string(st))
		}
	}
	return m
}

// Metrics are the runs' counters (tests read them).
func (s *Runs) Metrics() *Metrics { return s.m }

// register registers m and the gauges s reads from the store at scrape
// time with reg (none when nil).
func (m *Metrics) register(s *Runs, reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	for _, c := range []prometheus.Collector{m.Finished, m.Duration, m.Steps, m.StepTime, m.Executing, m.Resumed, m.Abandoned,
		m.Feedback, m.Verdicts, m.Changed, &storeCollector{s: s}, orphanCollector{s: s}} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("runner: register metrics: %w", err)
		}
	}
	return nil
}

var (
	descRuns  = prometheus.NewDesc("autocapture_runs", "Runs in the store by status.", []string{"status"}, nil)
	descDepth = prometheus.NewDesc("autocapture_runs_queue_depth",
		"Runs waiting in the queue (status queued).", nil, nil)
	descOldest = prometheus.NewDesc("autocapture_runs_queue_oldest_age_seconds",
		"How long the oldest queued run has waited (0 when none).", nil, nil)
	descUp = prometheus.NewDesc("autocapture_runs_store_up",
		"1 when the run store (SQLite or PostgreSQL) answered this scrape; 0: the store gauges are missing from it.", nil, nil)

	descOutboxPending = prometheus.NewDesc("autocapture_outbox_pending",
		"Thread operations (a run's parent message, step replies, verdict edits) recorded in the store and not yet "+
			"posted, by notifier. It rises while Slack is slow, down or rate-limiting and falls as delivery catches up; "+
			"one that only grows means nothing delivers (check autocapture_notify_failures_total). Read from the store: "+
			"every replica reports the same value.", []string{"sink"}, nil)
	descOutboxOldest = prometheus.NewDesc("autocapture_outbox_oldest_age_seconds",
		"How long the oldest thread operation not yet posted has waited, by notifier (0 when none): how late the "+
			"threads are.", []string{"sink"}, nil)
)

// storeCollector reads the run gauges from the database at scrape time.
type storeCollector struct{ s *Runs }

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descRuns
	ch <- descDepth
	ch <- descOldest
	ch <- descUp
	ch <- descOutboxPending
	ch <- descOutboxOldest
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second) // a scrape has no context
	defer cancel()
	st, err := c.s.QueueStats(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 1)
	for _, status := range vocab.RunStatuses {
		ch <- prometheus.MustNewConstMetric(descRuns, prometheus.GaugeValue, float64(st.ByStatus[status]), string(status))
	}
	ch <- prometheus.MustNewConstMetric(descDepth, prometheus.GaugeValue, float64(st.Queued))
	ch <- prometheus.MustNewConstMetric(descOldest, prometheus.GaugeValue, st.OldestQueued.Seconds())
	backlog, err := c.s.OutboxBacklog(ctx)
	if err != nil { // as for the queue: the scrape goes on without these series
		return
	}
	for sink, b := range backlog {
		ch <- prometheus.MustNewConstMetric(descOutboxPending, prometheus.GaugeValue, float64(b.Pending), sink)
		ch <- prometheus.MustNewConstMetric(descOutboxOldest, prometheus.GaugeValue, b.Oldest.Seconds(), sink)
	}
}

// Backlog is one notifier's undelivered thread operations.
type Backlog struct {
	Pending int
	Oldest  time.Duration // on the database's clock
}

// OutboxBacklog counts the undelivered thread operations by sink: every
// configured sink (zero when it has none) and any other that still has rows
// (a notifier since removed from the config).
func (s *Runs) OutboxBacklog(ctx context.Context) (map[string]Backlog, error) {
	out := make(map[string]Backlog, len(s.out.Sinks()))
	for _, sink := range s.out.Sinks() {
		out[sink] = Backlog{}
	}
	backlog, err := s.tables.Outbox.Backlog(ctx, s.db)
	if err != nil {
		return nil, fmt.Errorf("runner: outbox backlog: %w", err)
	}
	for _, b := range backlog {
		out[b.Sink] = Backlog{Pending: b.Pending, Oldest: max(0, time.Duration(b.WaitedMS)*time.Millisecond)}
	}
	return out, nil
}

// QueueStats is the store's view of the queue.
type QueueStats struct {
	ByStatus     map[vocab.Status]int
	Queued       int
	OldestQueued time.Duration
}

// QueueStats counts runs by status and measures the oldest queued run's wait.
func (s *Runs) QueueStats(ctx context.Context) (QueueStats, error) {
	st := QueueStats{ByStatus: map[vocab.Status]int{}}
	byStatus, err := s.tables.Runs.CountByStatus(ctx, s.db)
	if err != nil {
		return st, fmt.Errorf("runner: queue stats: %w", err)
	}
	st.ByStatus = byStatus
	st.Queued = st.ByStatus[vocab.StatusQueued]
	waitedMS, err := s.tables.Runs.OldestWait(ctx, s.db, vocab.StatusQueued) // on the database's clock
	if err != nil {
		return st, fmt.Errorf("runner: queue stats: %w", err)
	}
	if waitedMS.Valid {
		st.OldestQueued = max(0, time.Duration(waitedMS.Int64)*time.Millisecond)
	}
	return st, nil
}
