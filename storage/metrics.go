package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/autocapture/autocapture/vocab"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics count what reaches a backend: bytes and objects uploaded, and
// failed uploads by reason (see FailureReason).
type Metrics struct {
	bytes, objects, failures *prometheus.CounterVec
}

// The reasons of autocapture_storage_upload_failures_total, a fixed set.
const (
	ReasonUnavailable = "unavailable" // the store could not be reached or served (see Unavailable)
	ReasonDenied      = "denied"      // credentials or policy (a configuration error)
	ReasonConflict    = "conflict"    // the key holds other content (ErrConflict)
	ReasonTooLarge    = "too_large"   // the store refused the size
	ReasonOther       = "other"
)

// NewMetrics registers the upload counters on reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "autocapture_storage_uploaded_bytes_total",
			Help: "Stored bytes (compressed, when the store compressed them) of artifacts uploaded, late uploads from the spool included."}, []string{"backend"}),
		objects: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "autocapture_storage_uploaded_objects_total",
			Help: "Artifacts uploaded (an idempotent re-put of a stored key included)."}, []string{"backend"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "autocapture_storage_upload_failures_total",
			Help: "Failed uploads by reason: unavailable (spooled when a spool is configured), denied, conflict, too_large, other."}, []string{"backend", "reason"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.bytes, m.objects, m.failures} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("storage: metrics: %w", err)
			}
		}
	}
	return m, nil
}

// Instrument wraps s so its uploads are counted under backend ("local", "s3").
func (m *Metrics) Instrument(s vocab.Store, backend string) *Instrumented {
	for _, reason := range []string{ReasonUnavailable, ReasonDenied, ReasonConflict, ReasonTooLarge, ReasonOther} {
		m.failures.WithLabelValues(backend, reason) // every series from the start: rate() sees the first failure
	}
	m.bytes.WithLabelValues(backend)
	m.objects.WithLabelValues(backend)
	return &Instrumented{Store: s, m: m, backend: backend}
}

// Instrumented is a Store whose Put and PutStored are counted.
type Instrumented struct {
	vocab.Store
	m       *Metrics
	backend string
}

var _ StoredPutter = (*Instrumented)(nil)

// Put counts the upload or its failure.
func (i *Instrumented) Put(ctx context.Context, key string, r io.Reader, meta vocab.ObjectMeta) (vocab.Object, error) {
	obj, err := i.Store.Put(ctx, key, r, meta)
	i.count(obj, err)
	return obj, err
}

// PutStored counts the upload or its failure; the wrapped store must be a
// StoredPutter.
func (i *Instrumented) PutStored(ctx context.Context, obj vocab.Object, r io.Reader) (vocab.Object, error) {
	sp, ok := i.Store.(StoredPutter)
	if !ok {
		return vocab.Object{}, fmt.Errorf("storage: the %s backend cannot take stored bytes", i.backend)
	}
	up, err := sp.PutStored(ctx, obj, r)
	i.count(up, err)
	return up, err
}

func (i *Instrumented) count(obj vocab.Object, err error) {
	switch {
	case err == nil && !obj.Pending:
		i.m.bytes.WithLabelValues(i.backend).Add(float64(obj.Size))
		i.m.objects.WithLabelValues(i.backend).Inc()
	case err != nil && !errors.Is(err, context.Canceled): // a caller that stopped is not the store's failure
		i.m.failures.WithLabelValues(i.backend, FailureReason(err)).Inc()
	}
}

// FailureReason classifies a failed upload into the fixed set of
// autocapture_storage_upload_failures_total's reasons.
func FailureReason(err error) string {
	switch {
	case errors.Is(err, ErrConflict):
		return ReasonConflict
	case errors.Is(err, vocab.ErrStoreAccessDenied), errors.Is(err, vocab.ErrStoreNoCredentials):
		return ReasonDenied
	}
	var ae smithy.APIError
	var re *smithyhttp.ResponseError
	if errors.As(err, &ae) && ae.ErrorCode() == "EntityTooLarge" || errors.As(err, &re) && re.HTTPStatusCode() == http.StatusRequestEntityTooLarge {
		return ReasonTooLarge
	}
	if Unavailable(err) {
		return ReasonUnavailable
	}
	return ReasonOther
}

// spoolCollector reports the spool's backlog at each scrape.
type spoolCollector struct {
	s                    *Spool
	files, bytes, oldest *prometheus.Desc
	now                  func() time.Time
}

// RegisterSpool registers the backlog gauges of sp on reg:
// autocapture_spool_files, autocapture_spool_bytes and
// autocapture_spool_oldest_age_seconds (0 when empty), read from the spool
// folder at each scrape.
func RegisterSpool(reg prometheus.Registerer, sp *Spool) error {
	c := &spoolCollector{s: sp, now: time.Now,
		files: prometheus.NewDesc("autocapture_spool_files", "Artifacts kept in this replica's local spool, waiting for their upload.", nil, nil),
		bytes: prometheus.NewDesc("autocapture_spool_bytes", "Stored bytes of the artifacts in this replica's local spool.", nil, nil),
		oldest: prometheus.NewDesc("autocapture_spool_oldest_age_seconds",
			"Age of the oldest artifact in this replica's local spool (0 when it is empty).", nil, nil)}
	if err := reg.Register(c); err != nil {
		return fmt.Errorf("storage: spool metrics: %w", err)
	}
	return nil
}

func (c *spoolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.files
	ch <- c.bytes
	ch <- c.oldest
}

func (c *spoolCollector) Collect(ch chan<- prometheus.Metric) {
	var files, bytes int
	var oldest time.Time
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := c.s.Spooled(ctx, func(obj vocab.Object, at time.Time) error {
		files++
		bytes += int(obj.Size)
		if oldest.IsZero() || at.Before(oldest) {
			oldest = at
		}
		return nil
	})
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.files, err)
		return
	}
	age := 0.0
	if !oldest.IsZero() {
		age = max(0, c.now().Sub(oldest).Seconds())
	}
	ch <- prometheus.MustNewConstMetric(c.files, prometheus.GaugeValue, float64(files))
	ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(bytes))
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, age)
}
