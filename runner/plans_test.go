package runner

import (
	"context"
	"database/sql"
	"regexp"
	"strings"
	"testing"

	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/runner/lifecycle"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// hotQuery is a statement run on every reaper tick, accept, claim or list
// request, with realistic arguments.
type hotQuery struct {
	name string
	sql  string
	args []any
	// uses matches what the plan must read (an index, river_job's primary key).
	uses string
}

func hotQueries(t *testing.T, s *Service) []hotQuery {
	t.Helper()
	expired, expiredArgs := tablesOf(s).Runs.ReapQuery(database.Expired, s.life.Config().LeaseTimeout, vocab.StatusQueued)
	stranded, strandedArgs := tablesOf(s).Runs.ReapQuery(database.Stranded, s.life.Config().LeaseTimeout, vocab.StatusQueued)
	f, _, err := lifecycle.ListFilter(runs.ListQuery{Alertname: "Alert3"})
	if err != nil {
		t.Fatal(err)
	}
	list, listArgs := database.ListQuery(f)
	seen, seenArgs := tablesOf(s).Seen.Query(seenFilter())
	return []hotQuery{
		{"reap: expired leases", expired, expiredArgs, "autocapture_runs_lease"},
		{"reap: stranded queued runs", stranded, strandedArgs, "INTEGER PRIMARY KEY|river_job_pkey"},
		{"accept: resolved alert's run", database.QResolvedRun, []any{"seedfp-7@0", "seedfp-7", int64(0)}, "autocapture_runs_fingerprint"},
		{"claim", dialectOf(s).SQL(database.QClaim), []any{"me", int64(1000), vocab.StatusRunning, "seed-0", 0}, "sqlite_autoindex_autocapture_runs_1|autocapture_runs_pkey"},
		{"claim: playbook slot", database.QPlaybookSlot, []any{"pb1", "seed-0"}, "autocapture_runs_lease"},
		{"list by alertname", list, listArgs, "autocapture_runs_alertname"},
		{"seen before", seen, seenArgs, "autocapture_runs_seen_instance(.|\n)*autocapture_runs_seen_model"},
	}
}

// fullScan matches a plan line that reads a whole table of ours or River's.
var fullScan = regexp.MustCompile(`(?i)^SCAN (autocapture_\w+|river_job|r|rp|j)\b|Seq Scan on (autocapture_\w+|river_job)`)

// TestHotQueriesUseIndexes: at 100k runs (SQLite, as EXPLAIN QUERY PLAN says
// without ANALYZE, as in production) and on PostgreSQL with sequential scans
// priced out, no hot query scans a whole table, and each reads what it should.
func TestHotQueriesUseIndexes(t *testing.T) {
	t.Parallel()
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		s := newService(t, db, planner(), false)
		n, explain := 100_000, "EXPLAIN QUERY PLAN "
		var conn *sql.Conn
		if dialectOf(s) == database.Postgres {
			n, explain = 1_000, "EXPLAIN "
			var err error
			if conn, err = rawDB(s).Conn(context.Background()); err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.ExecContext(context.Background(), `SET enable_seqscan = off`); err != nil {
				t.Fatal(err)
			}
		}
		seedRuns(t, s, n)
		for _, q := range hotQueries(t, s) {
			plan := queryPlan(t, s, conn, explain+q.sql, q.args)
			t.Logf("%s:\n%s", q.name, strings.Join(plan, "\n"))
			for _, line := range plan {
				if fullScan.MatchString(strings.TrimSpace(line)) {
					t.Errorf("%s scans a whole table (%q); plan:\n%s", q.name, line, strings.Join(plan, "\n"))
				}
			}
			if !regexp.MustCompile(q.uses).MatchString(strings.Join(plan, "\n")) {
				t.Errorf("%s does not read %s; plan:\n%s", q.name, q.uses, strings.Join(plan, "\n"))
			}
		}
	})
}

// queryPlan returns the plan's lines (SQLite's detail column, PostgreSQL's text).
func queryPlan(t *testing.T, s *Service, conn *sql.Conn, q string, args []any) []string {
	t.Helper()
	var rows *sql.Rows
	var err error
	if conn != nil {
		rows, err = conn.QueryContext(context.Background(), q, args...)
	} else {
		rows, err = s.db.QueryContext(context.Background(), q, args...)
	}
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var plan []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, strings.TrimSpace(toString(vals[len(vals)-1])))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan
}

func toString(v any) string {
	if b, ok := v.([]byte); ok {
		return string(b)
	}
	s, _ := v.(string)
	return s
}
