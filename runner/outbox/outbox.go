// Package outbox holds a run's thread operations from the transaction that
// records them to the notifier that shows them: the closed set of operations
// (ops.go), each with its row and its content; the outbox they are appended
// to inside the run lifecycle's transactions (Append); and the deliverer that
// sends them, one thread at a time under a lease (deliver.go, lease.go), its
// River worker, its sweep of threads nobody delivers (sweep.go) and its
// metrics. The runner is its composition root: it hands the outbox its
// tables, its store and what the threads show of its runs (Content).
package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/notify"
)

// Store is what the outbox reads and writes its tables through: the
// runner's store (a *sql.DB in production; tests wrap it).
type Store interface {
	database.Querier
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// Config is what the runner hands the outbox.
type Config struct {
	// Sinks are the notifiers operations are delivered to, by name.
	Sinks  map[string]notify.Notifier
	Tables database.Tables
	// Store and Beat return the stores of the runner now: its own, and the
	// heartbeat's pool the thread leases are renewed on. Read at each use,
	// so a store the runner's tests wrap after Open (a crashed process) is
	// the one the outbox uses.
	Store, Beat func() Store
	// Client returns the runner's River client (delivery jobs are inserted
	// in the recording transaction).
	Client func() *river.Client[*sql.Tx]
	// Content is what operations read their content from at delivery.
	Content Content
	// Actions returns what an action's reply reads (nil: no actions); read
	// at delivery, as the actions are built after the outbox.
	Actions func() ActionContent
	// LeaseTimeout and HeartbeatInterval are the runs' (runs.lease_timeout,
	// runs.heartbeat_interval): a thread's lease is a run's.
	LeaseTimeout, HeartbeatInterval time.Duration
	// RenewTimeout bounds one renewal statement; BeatReady waits for the
	// heartbeat pool before one (runner/lifecycle's lease.go).
	RenewTimeout func() time.Duration
	BeatReady    func(ctx context.Context)
	Log          *zap.Logger
}

// Outbox records thread operations and delivers them.
type Outbox struct {
	cfg       Config
	tables    database.Tables
	sinks     map[string]notify.Notifier
	sinkOrder []string
	log       *zap.Logger
	m         metrics
	pumps     pumpHolds // threads this process's deliverers hold (lease.go)
}

// New builds the outbox of cfg.
func New(cfg Config) *Outbox {
	s := &Outbox{cfg: cfg, tables: cfg.Tables, sinks: map[string]notify.Notifier{}, log: cfg.Log, m: newMetrics()}
	for name, n := range cfg.Sinks {
		if n != nil {
			s.sinks[name] = n
		}
	}
	s.sinkOrder = slices.Sorted(maps.Keys(s.sinks))
	if s.log == nil {
		s.log = zap.NewNop()
	}
	for _, sink := range s.sinkOrder {
		for _, reason := range []string{"rate_limited", "error"} {
			s.m.failed.WithLabelValues(sink, reason)
		}
		for _, k := range []opKind{opOpen, opReply, opUpdate} {
			s.m.delivered.WithLabelValues(sink, string(k))
		}
	}
	return s
}

func (s *Outbox) db() Store                      { return s.cfg.Store() }
func (s *Outbox) beat() Store                    { return s.cfg.Beat() }
func (s *Outbox) client() *river.Client[*sql.Tx] { return s.cfg.Client() }

// Sinks are the names of the notifiers, sorted.
func (s *Outbox) Sinks() []string { return s.sinkOrder }

// AddWorker registers the delivery jobs' worker.
func (s *Outbox) AddWorker(w *river.Workers) error {
	if err := river.AddWorkerSafely(w, &worker{s: s}); err != nil {
		return fmt.Errorf("runner: river worker: %w", err)
	}
	return nil
}

// Queues is the River queue deliveries run on: each thread is delivered by
// one worker at a time (a lease on autocapture_threads), several threads at
// once.
func (s *Outbox) Queues() map[string]river.QueueConfig {
	return map[string]river.QueueConfig{Queue: {MaxWorkers: Workers}}
}

// metrics are the deliverers' counters.
type metrics struct {
	delivered, failed *prometheus.CounterVec
}

func newMetrics() metrics {
	return metrics{
		delivered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "autocapture_notify_delivered_total",
			Help: "Thread operations this process delivered, by notifier and operation (open, reply, update)."},
			[]string{"sink", "op"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "autocapture_notify_failures_total",
			Help: "Thread operations a notifier did not take, by notifier and reason (rate_limited, error); they are retried."},
			[]string{"sink", "reason"}),
	}
}

// Collectors are the outbox's metrics, to register.
func (s *Outbox) Collectors() []prometheus.Collector {
	return []prometheus.Collector{s.m.delivered, s.m.failed}
}
