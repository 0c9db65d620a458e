package lifecycle

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/prometheus/client_golang/prometheus"
)

// TestOrphanedRunJobsMetric: autocapture_river_jobs_orphaned counts a run's
// River job left running by a replica that is gone — its run's lease lapsed,
// the run resumed under a newer job, the run final, or never claimed — and
// not a job whose run a live lease holds, nor one fetched or finished
// moments ago (the worker has yet to claim the run, River to complete the
// job), nor one waiting in the queue. Each row puts the job and its run in
// that state, on both stores, and reads the gauge through a scrape; on
// PostgreSQL the query docs/deploy.md gives operators must find the same.
func TestOrphanedRunJobsMetric(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		reg := prometheus.NewRegistry()
		s := newProc(t, db, planner(), false, func(o *procOpts) { o.reg = reg }) // not started: nothing works the job
		lease := fastRuns().LeaseTimeout.Milliseconds()
		readme := ""
		if s.dialect == database.Postgres {
			readme = readmeOrphanQuery(t, fastRuns().LeaseTimeout)
		}
		for i, tc := range []struct {
			name string
			job  string // SET list of the run's job (generation 0)
			run  string // SET list of the run; {lease} is lease_timeout in ms
			want float64
		}{
			{name: "waiting in the queue", job: "state = 'available'", run: "owner = NULL", want: 0},
			{name: "its owner holds the lease", job: "state = 'running', attempt = 1, attempted_at = " + dbTime(s, -600),
				run: "owner = 'b', status = 'running', lease_until = {now} + {lease}", want: 0},
			{name: "fetched moments ago, not claimed yet", job: "state = 'running', attempt = 1, attempted_at = " + dbTime(s, 0),
				run: "owner = NULL", want: 0},
			{name: "fetched long ago, never claimed", job: "state = 'running', attempt = 1, attempted_at = " + dbTime(s, -600),
				run: "owner = NULL", want: 1},
			{name: "its owner's lease lapsed", job: "state = 'running', attempt = 1, attempted_at = " + dbTime(s, -600),
				run: "owner = 'b', status = 'running', lease_until = {now} - 1", want: 1},
			{name: "resumed under a newer job", job: "state = 'running', attempt = 1, attempted_at = " + dbTime(s, -600),
				run: "owner = 'c', status = 'running', generation = 1, lease_until = {now} + {lease}", want: 1},
			{name: "final moments ago", job: "state = 'running', attempt = 1, attempted_at = " + dbTime(s, -600),
				run: "owner = NULL, status = 'succeeded', finished_at = {now}", want: 0},
			{name: "final long ago", job: "state = 'running', attempt = 1, attempted_at = " + dbTime(s, -600),
				run: "owner = NULL, status = 'succeeded', finished_at = {now} - 2 * {lease}", want: 1},
		} {
			id := acceptOne(t, s, firing(fmt.Sprintf("fp-orphan-%d", i), time.Now().UTC())).RunID
			setJob(t, s, id, tc.job)
			run := strings.ReplaceAll(s.dialect.SQL(tc.run), "{lease}", strconv.FormatInt(lease, 10))
			if _, err := s.db.ExecContext(context.Background(), `UPDATE autocapture_runs SET `+run+` WHERE id = $1`, id); err != nil {
				t.Fatalf("%s: set run: %v", tc.name, err)
			}
			if got := gaugeValue(t, reg, "autocapture_river_jobs_orphaned"); got != tc.want {
				t.Errorf("%s: autocapture_river_jobs_orphaned %v, want %v", tc.name, got, tc.want)
			}
			if readme != "" {
				rows, err := s.db.QueryContext(context.Background(), readme)
				if err != nil {
					t.Fatalf("docs/deploy.md's query for orphaned jobs: %v", err)
				}
				n := 0
				for rows.Next() {
					n++
				}
				rows.Close()
				if float64(n) != tc.want {
					t.Errorf("%s: docs/deploy.md's query for orphaned jobs answers %d rows, want %v", tc.name, n, tc.want)
				}
			}
			if _, err := s.db.ExecContext(context.Background(), `UPDATE river_job SET state = 'completed', finalized_at = `+
				dbTime(s, 0)+` WHERE `+jobArg(s, "run_id")+` = $1`, id); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// readmeOrphanQuery is the query docs/deploy.md gives operators to see orphaned
// jobs, its runs.lease_timeout (the default, 20 s) made lease.
func readmeOrphanQuery(t *testing.T, lease time.Duration) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "`autocapture_river_jobs_orphaned` counts them")
	_, rest, ok2 := strings.Cut(rest, "```sql\n")
	q, _, ok3 := strings.Cut(rest, "```")
	if !ok || !ok2 || !ok3 || !strings.Contains(q, "'20 seconds'") || !strings.Contains(q, "20000") {
		t.Fatalf("docs/deploy.md: no query for orphaned jobs after \"autocapture_river_jobs_orphaned counts them\" with 20 s as the lease")
	}
	q = strings.ReplaceAll(q, "'20 seconds'", fmt.Sprintf("'%d milliseconds'", lease.Milliseconds()))
	return strings.ReplaceAll(q, "20000", strconv.FormatInt(lease.Milliseconds(), 10))
}
