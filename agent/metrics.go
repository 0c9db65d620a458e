package agent

import "github.com/prometheus/client_golang/prometheus"

// metrics are the agent's counters. Errors are labelled by the word of the
// error answer (unauthorized, not_found, bad_since, list_failed, …) plus
// stream_cut for a stream that ended before its last byte.
type metrics struct {
	files   prometheus.Counter
	bytes   prometheus.Counter
	removed prometheus.Counter
	errors  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		files: prometheus.NewCounter(prometheus.CounterOpts{Name: "autocapture_agent_files_served_total",
			Help: "Files (or ranges of files) streamed to the end."}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "autocapture_agent_bytes_served_total",
			Help: "Bytes of file content written to clients."}),
		removed: prometheus.NewCounter(prometheus.CounterOpts{Name: "autocapture_agent_files_removed_total",
			Help: "Files removed on request (after upload)."}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "autocapture_agent_errors_total",
			Help: "Requests answered with an error, and streams cut short, by reason."}, []string{"reason"}),
	}
	for _, c := range []prometheus.Collector{m.files, m.bytes, m.removed, m.errors} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, r := range []string{"unauthorized", "not_found", "stream_cut"} {
		m.errors.WithLabelValues(r) // present at 0, so a rate() works from the start
	}
	return m, nil
}
