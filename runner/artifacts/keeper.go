package artifacts

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/links"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/vocab"
)

// Queue is the River queue of the daemon's housekeeping: manifests and
// retention.
const Queue = "autocapture_background"

// jobMaxAttempts is the runner's River default (its queue.go):
// uploads snooze, so it never discards one.
const jobMaxAttempts = 5

// Store is what the Keeper reads and writes its tables through: the runner's
// store (a *sql.DB in production; tests wrap it).
type Store interface {
	database.Querier
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// Runs is what the Keeper needs of the run lifecycle (runner/lifecycle's
// Seams).
type Runs interface {
	// ManifestOf is what run runID's manifest says of it; false when none
	// is to be written: the run is gone, not finished (asked for by a finish
	// that was not committed as such), or skipped before any playbook ran.
	ManifestOf(ctx context.Context, runID string) (ManifestInput, bool, error)
	// UploadsDone runs in tx, the transaction that marked the run's last
	// pending upload uploaded (n of them) under the run row's lock: it
	// records the thread's reply (outbox.UploadsDone) and asks for the
	// run's manifest to be rewritten when the run is finished.
	UploadsDone(ctx context.Context, tx *sql.Tx, runID string, n int) error
}

// Deps is what the runner hands the Keeper.
type Deps struct {
	// Store returns the runner's store now: read at each use, so a store the
	// runner's tests wrap after Open (a crashed process) is the one used.
	Store  func() Store
	Tables database.Tables
	// Client returns the runner's River client (jobs are inserted in the
	// recording transaction).
	Client func() *river.Client[*sql.Tx]
	// Env is the daemon's; its Store is where artifacts go (nil: none).
	Env *vocab.Env
	// Spool is Env.Store's local spool; nil: no late uploads.
	Spool Spool
	// Replica is runs.replica (ReplicaName fills it from the hostname);
	// Owner is this process's id (boot of its upload jobs).
	Replica, Owner string
	// MaxArtifactBytes is runs.max_artifact_bytes (0: no cap).
	MaxArtifactBytes int64
	// Retention deletes old finished runs (zero: runs are kept for ever).
	Retention config.Retention
	// UploadBackoff is the first wait after a failed upload (0: 1 s).
	UploadBackoff time.Duration
	// Links says how threads link artifacts; Now is the clock links expire on.
	Links ThreadLinks
	Now   func() time.Time
	Runs  Runs
	Log   *zap.Logger
}

// Keeper is the artifacts' part of the run service: the byte cap, the
// manifests, late uploads, retention and the threads' links.
type Keeper struct {
	d      Deps
	tables database.Tables
	log    *zap.Logger
	up     *uploader     // nil without a spool
	signer *links.Signer // the artifact links' (OpenSigner)
	m      Metrics
	// retentionMu serialises retention passes in this process.
	retentionMu sync.Mutex

	bg     context.Context
	stopBG context.CancelFunc
	loops  sync.WaitGroup
}

// New builds the Keeper of d; HookSpool then has the spool report to it.
func New(d Deps) *Keeper {
	k := &Keeper{d: d, tables: d.Tables, log: d.Log, m: newMetrics()}
	if k.log == nil {
		k.log = zap.NewNop()
	}
	k.bg, k.stopBG = context.WithCancel(context.Background())
	k.up = newUploader(d)
	return k
}

// HookSpool has the spool (with one) record every file it keeps: once the
// runner is built, before any step puts.
func (k *Keeper) HookSpool() {
	if k.up != nil {
		k.d.Spool.OnSpool(k.spooled)
	}
}

func (k *Keeper) db() Store                      { return k.d.Store() }
func (k *Keeper) client() *river.Client[*sql.Tx] { return k.d.Client() }

// store is where artifacts (and manifests) go; nil without one.
func (k *Keeper) store() vocab.Store {
	if k.d.Env == nil {
		return nil
	}
	return k.d.Env.Store
}

// RunEnv is the Env one attempt of run runID executes with: the daemon's,
// under the run's byte cap (see the package's RunEnv).
func (k *Keeper) RunEnv(runID string, recorded map[string]map[string]executor.StepRecord) *vocab.Env {
	return RunEnv(k.d.Env, runID, k.d.MaxArtifactBytes, recorded)
}

// AddWorkers registers the Keeper's River workers: manifests, retention
// and uploads.
func (k *Keeper) AddWorkers(w *river.Workers) error {
	if err := river.AddWorkerSafely(w, &manifestWorker{k: k}); err != nil {
		return fmt.Errorf("runner: river worker: %w", err)
	}
	if err := river.AddWorkerSafely(w, &retentionWorker{k: k}); err != nil {
		return fmt.Errorf("runner: river worker: %w", err)
	}
	if err := river.AddWorkerSafely(w, &uploadWorker{k: k}); err != nil {
		return fmt.Errorf("runner: river worker: %w", err)
	}
	return nil
}

// Queues are the Keeper's River queues: manifests and retention share Queue,
// apart from runs and deliveries (one queue, not two: each queue is a
// producer polling the job table, and on SQLite every fetch is a write; a
// second one made a 200-alert storm's deliveries ~3x slower under the race
// detector); late uploads go on this replica's own queue (with a spool).
func (k *Keeper) Queues() map[string]river.QueueConfig {
	q := map[string]river.QueueConfig{Queue: {MaxWorkers: manifestWorkers + 1}}
	if k.up != nil {
		q[k.up.queue] = river.QueueConfig{MaxWorkers: uploadWorkers}
	}
	return q
}

// Start begins the spool scans (with a spool); after River's start.
func (k *Keeper) Start() {
	if k.up != nil {
		k.loops.Add(1)
		go k.uploadLoop()
	}
}

// Stop ends the background work and waits for it.
func (k *Keeper) Stop() {
	k.stopBG()
	k.loops.Wait()
}

// Metrics are the Keeper's counters.
type Metrics struct {
	// RetentionDeleted counts what retention deleted, by kind (runs, objects).
	RetentionDeleted *prometheus.CounterVec
	// RetentionErrors counts old runs retention could not delete, and failed scans.
	RetentionErrors prometheus.Counter
}

// Metrics are the Keeper's counters (tests read them).
func (k *Keeper) Metrics() Metrics { return k.m }

func newMetrics() Metrics {
	m := Metrics{
		RetentionDeleted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "autocapture_retention_deleted_total",
			Help: "What retention deleted in this process: runs (with all their rows) and objects."}, []string{"kind"}),
		RetentionErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "autocapture_retention_errors_total",
			Help: "Old runs retention could not delete (they are tried again on the next tick), and failed scans."}),
	}
	m.RetentionDeleted.WithLabelValues("runs")
	m.RetentionDeleted.WithLabelValues("objects")
	return m
}

// Collectors are the Keeper's metrics, to register.
func (k *Keeper) Collectors() []prometheus.Collector {
	return []prometheus.Collector{k.m.RetentionDeleted, k.m.RetentionErrors}
}
