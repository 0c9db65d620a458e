package runner

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// benchSizes are the store sizes of BenchmarkAtScale: AUTOCAPTURE_BENCH_RUNS
// (comma-separated; 1000 makes a cheap smoke of it), else 1k, 10k and 100k.
func benchSizes(b *testing.B) []int {
	raw := os.Getenv("AUTOCAPTURE_BENCH_RUNS")
	if raw == "" {
		return []int{1_000, 10_000, 100_000}
	}
	var sizes []int
	for _, f := range strings.Split(raw, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 100 {
			b.Fatalf("AUTOCAPTURE_BENCH_RUNS: %q is not a size of at least 100", f)
		}
		sizes = append(sizes, n)
	}
	return sizes
}

// BenchmarkAtScale measures what every replica runs all the time, on a store
// holding N runs (seedRuns: 98% finished, 1% queued with a live job, 1%
// running under a live lease): one reaper tick (finds nothing to resume), one
// Accept of a 20-alert batch of new runs, one claim with its playbook slot
// count, one list page by alertname, one seen-before read (the earlier runs
// of an alert on its instance or model). Each should stay under 10 ms at
// 100k. bench/db.sh runs it and prints a table. Seeded ids are fixed: the
// postgres-url case needs an empty database.
func BenchmarkAtScale(b *testing.B) {
	for _, st := range benchStores() {
		for _, n := range benchSizes(b) {
			b.Run(fmt.Sprintf("%s/runs=%d", st.name, n), func(b *testing.B) {
				s := newService(b, st.db(b), planner(), false)
				seedRuns(b, s, n)
				b.Run("reap", func(b *testing.B) { benchReap(b, s) })
				b.Run("accept", func(b *testing.B) { benchAccept(b, s) })
				b.Run("claim", func(b *testing.B) { benchClaim(b, s) })
				b.Run("list", func(b *testing.B) { benchList(b, s) })
				b.Run("seen", func(b *testing.B) { benchSeen(b, s) })
			})
		}
	}
}

func benchReap(b *testing.B, s *Service) {
	ctx := context.Background()
	for b.Loop() {
		if n, err := s.life.ReapOnce(ctx); err != nil || n != 0 {
			b.Fatalf("reap tick resumed %d runs (%v); the seeded store has none to resume", n, err)
		}
	}
}

func benchAccept(b *testing.B, s *Service) {
	ctx := context.Background()
	nonce, seq := uuid.NewString()[:8], 0
	for b.Loop() {
		alerts := make([]template.Alert, 20)
		for j := range alerts {
			seq++
			alerts[j] = firing(fmt.Sprintf("bench-%s-%d", nonce, seq), time.Unix(1_700_000_000, 0))
		}
		if _, err := s.Accept(ctx, alerts); err != nil {
			b.Fatal(err)
		}
	}
}

// benchClaim claims a seeded queued run and counts its playbook's slots, as
// a worker does before it runs a new run; putting the run back is not timed.
func benchClaim(b *testing.B, s *Service) {
	ctx := context.Background()
	p := &playbooks.Plan{Playbook: "pb1", MaxConcurrent: 1_000_000}
	for i := 0; i < b.N; i++ {
		// The claim's statement, as the worker's claim runs it.
		if _, err := tablesOf(s).Runs.Claim(ctx, s.db, s.life.Owner(), s.life.Config().LeaseTimeout.Milliseconds(),
			vocab.StatusRunning, "seed-0", 0); err != nil {
			b.Fatalf("claim: %v", err)
		}
		if err := s.grp.CheckSlot(ctx, s.db, "seed-0", p); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if _, err := s.db.ExecContext(ctx, `UPDATE autocapture_runs SET owner = NULL, lease_until = NULL,
			status = 'queued', attempts = 0 WHERE id = 'seed-0'`); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

func benchList(b *testing.B, s *Service) {
	ctx := context.Background()
	for b.Loop() {
		page, err := s.List(ctx, runs.ListQuery{Alertname: "Alert3"})
		if err != nil || len(page.Runs) != 50 {
			b.Fatalf("list: %d runs, %v", len(page.Runs), err)
		}
	}
}

// seenFilter is a seen-before read of a seeded alert: Alert3 on an instance
// and a model it fires on, over the whole seeded span.
func seenFilter() database.SeenFilter {
	return database.SeenFilter{Alertname: "Alert3", Instance: "10.0.0.13:8000", Model: "model-3",
		Since: 0, Before: time.Now().Add(time.Hour).UnixMilli(), Exclude: "seed-3", Limit: 50}
}

func benchSeen(b *testing.B, s *Service) {
	ctx := context.Background()
	for b.Loop() {
		got, err := tablesOf(s).Seen.List(ctx, s.db, seenFilter())
		if err != nil || len(got) != 50 {
			b.Fatalf("seen: %d runs, %v", len(got), err)
		}
	}
}
