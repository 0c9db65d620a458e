package targets

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"go.uber.org/zap"
)

// scrapedQuery lists every instance Prometheus scrapes, up or down: a target that
// fails its scrape is still one the operator configured.
const scrapedQuery = `max by (instance) (up)`

// staleFactor: after a failed refresh the last good list is kept this many TTLs.
const staleFactor = 10

// scrapedSet caches the instances Prometheus scrapes as allow-list entries.
type scrapedSet struct {
	api  promv1.API
	ttl  time.Duration
	now  func() time.Time
	log  *zap.Logger
	mu   sync.Mutex
	list []entry
	at   time.Time // when list was fetched; zero before the first success
	last time.Time // when the last attempt was made
	err  error     // the last attempt's error
}

func newScrapedSet(opts Options) (*scrapedSet, error) {
	if opts.PrometheusURL == "" {
		return nil, fmt.Errorf("no prometheus.url configured")
	}
	hc := opts.PrometheusClient
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	c, err := api.NewClient(api.Config{Address: opts.PrometheusURL, Client: hc})
	if err != nil {
		return nil, fmt.Errorf("prometheus %s: %w", opts.PrometheusURL, err)
	}
	s := &scrapedSet{api: promv1.NewAPI(c), ttl: opts.ScrapedTTL, now: opts.Now, log: opts.Log}
	if s.ttl <= 0 {
		s.ttl = 30 * time.Second
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	return s, nil
}

// get returns the cached list, refreshing it when older than the TTL. One caller
// refreshes while the others wait on the mutex. After a failure, the last good
// list is used for up to staleFactor TTLs, and the failure is retried at most
// once per TTL; the error is returned so a refusal can mention it.
func (s *scrapedSet) get(ctx context.Context) ([]entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if now.Sub(s.last) < s.ttl {
		return s.current(now)
	}
	s.last = now
	list, err := s.fetch(ctx)
	if err != nil {
		s.err = err
		s.log.Warn("Could not refresh the instances Prometheus scrapes; keeping the last list.",
			zap.Error(err), zap.Int("kept", len(s.list)))
		return s.current(now)
	}
	s.list, s.at, s.err = list, now, nil
	return s.list, nil
}

// current is the cached list unless it is too old to trust.
func (s *scrapedSet) current(now time.Time) ([]entry, error) {
	if s.at.IsZero() || now.Sub(s.at) > staleFactor*s.ttl {
		if s.err == nil {
			return nil, nil
		}
		return nil, s.err
	}
	return s.list, s.err
}

// fetch asks Prometheus for every scraped instance.
func (s *scrapedSet) fetch(ctx context.Context) ([]entry, error) {
	v, _, _, err := s.api.Query(ctx, scrapedQuery, time.Time{})
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", scrapedQuery, err)
	}
	vec, ok := v.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("query %s: got a %s, want a vector", scrapedQuery, v.Type())
	}
	out := make([]entry, 0, len(vec))
	for _, smp := range vec {
		inst := string(smp.Metric[model.InstanceLabel])
		e, err := parseEntry(inst)
		// Only host:port: an instance without a port (relabelled to a bare host)
		// would otherwise allow every port of that host.
		if err != nil || e.any || e.port == 0 || e.prefix.IsValid() && e.prefix.Bits() != e.prefix.Addr().BitLen() {
			s.log.Debug("Skipped a scraped instance that is not host:port.", zap.String("instance", inst))
			continue
		}
		e.scraped = true
		out = append(out, e)
	}
	return out, nil
}
