package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
)

// benchStore is a database a benchmark opens fresh.
type benchStore struct {
	name string
	db   func(b *testing.B) testenv.DB
}

// benchStores are SQLite, testenv's PostgreSQL and, when
// AUTOCAPTURE_BENCH_DATABASE_URL is set, that PostgreSQL ("postgres-url").
func benchStores() []benchStore {
	stores := []benchStore{
		{"sqlite", func(b *testing.B) testenv.DB { return testenv.DB{Path: filepath.Join(b.TempDir(), "bench.db")} }},
		{"postgres", func(b *testing.B) testenv.DB { return testenv.DB{URL: testenv.StartPostgres(b)} }},
	}
	if u := os.Getenv("AUTOCAPTURE_BENCH_DATABASE_URL"); u != "" {
		stores = append(stores, benchStore{"postgres-url", func(*testing.B) testenv.DB { return testenv.DB{URL: u} }})
	}
	return stores
}

// BenchmarkAccept measures Accept of a 20-alert webhook batch (all new runs: 20
// run rows and 20 River jobs in one transaction) on each store, and reports
// alerts/s and the p50/p99 latency of one batch.
//
// The test cluster of testenv runs with fsync off, so its numbers leave out the
// cost of durability; AUTOCAPTURE_BENCH_DATABASE_URL adds a "postgres-url" case
// against a PostgreSQL of your own (a cluster with fsync on, to measure commits
// as production pays them). Fingerprints carry a nonce, so it may be reused.
func BenchmarkAccept(b *testing.B) {
	const batch = 20
	for _, st := range benchStores() {
		b.Run(st.name, func(b *testing.B) {
			s := newService(b, st.db(b), planner(), false)
			ctx := context.Background()
			lat := make([]time.Duration, 0, b.N)
			nonce, seq := uuid.NewString()[:8], 0
			b.ResetTimer()
			for b.Loop() {
				alerts := make([]template.Alert, batch)
				for j := range alerts {
					seq++
					alerts[j] = firing(fmt.Sprintf("bench-%s-%d", nonce, seq), time.Unix(1_700_000_000, 0))
				}
				start := time.Now()
				if _, err := s.Accept(ctx, alerts); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			if len(lat) == 0 {
				return
			}
			slices.Sort(lat)
			var total time.Duration
			for _, l := range lat {
				total += l
			}
			b.ReportMetric(float64(len(lat)*batch)/total.Seconds(), "alerts/s")
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Microseconds())/1000, "p99-ms")
		})
	}
}
