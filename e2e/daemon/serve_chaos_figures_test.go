package daemon

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/slackstub"
	"github.com/autocapture/autocapture/runner/runs"
)

// runEndToThread measures, for every run, the time from its finished_at to
// the moment the Slack stand-in holds what the thread says of the end: the
// parent edited to the run's final status and the close/finished reply
// posted, whichever came later. A late upload's notice (uploads/done/…)
// waits for the bucket by design and is not counted. Both clocks are this
// machine's (the stand-in is in-process, PostgreSQL on loopback). A thread
// that never showed the end is reported, not measured. slowest is the run
// that waited longest.
func runEndToThread(t *testing.T, all []runs.Run, threads map[string][]slackstub.Message) (ds []time.Duration, slowest string) {
	t.Helper()
	var worst time.Duration
	for _, r := range all {
		if r.FinishedAt == nil || len(threads[r.ID]) != 1 {
			continue // the thread checks say why
		}
		p := threads[r.ID][0]
		var edited, replied time.Time
		for _, rev := range p.Revisions {
			if rev.Metadata != nil && rev.Metadata.EventPayload["status"] == string(r.Status) {
				edited = rev.At
				break
			}
		}
		for _, m := range p.Replies {
			if m.Metadata != nil && m.Metadata.EventPayload["key"] == "close/finished" && len(m.Revisions) > 0 {
				replied = m.Revisions[0].At
				break
			}
		}
		if edited.IsZero() || replied.IsZero() {
			t.Errorf("run %s (%s): its thread never showed the end (parent edited %v, close/finished posted %v)",
				r.ID, r.Status, !edited.IsZero(), !replied.IsZero())
			continue
		}
		shown := edited
		if replied.After(shown) {
			shown = replied
		}
		d := shown.Sub(*r.FinishedAt)
		if d > worst {
			worst, slowest = d, r.ID
		}
		ds = append(ds, d)
	}
	return ds, slowest
}

// maxEndToThreadP99 is a liveness ceiling on run end → the thread saying so,
// with replicas killed and every dependency down once; the figure itself is
// logged (docs/performance.md's table), since a timed bound on a loaded
// machine measures the machine. It must catch a dead deliverer's threads
// waiting out a fixed minute (the pump lease issue 22 replaced: p99 68 s).
// A thread may meet its deliverer killed twice in a row (a lease and the
// sweeper's 3 s grace each), Slack's outage (up to 5 s) and the backoff after
// it (1 + 2 + 4 s): 26 s; doubled for a machine at twice its cores' load.
const maxEndToThreadP99 = 2 * (2*(chaosLease+3*time.Second) + 5*time.Second + 7*time.Second)

// figures are the median, the 99th percentile (nearest rank) and the
// maximum of ds, rounded to milliseconds.
type figures struct {
	n              int
	p50, p99, pmax time.Duration
}

func figuresOf(ds []time.Duration) figures {
	if len(ds) == 0 {
		return figures{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(q float64) time.Duration {
		return s[max(int(math.Ceil(q*float64(len(s))))-1, 0)].Round(time.Millisecond)
	}
	return figures{n: len(s), p50: rank(0.5), p99: rank(0.99), pmax: s[len(s)-1].Round(time.Millisecond)}
}

func (f figures) String() string {
	return fmt.Sprintf("p50 %v, p99 %v, max %v over %d runs", f.p50, f.p99, f.pmax, f.n)
}

// logRunLines logs, from every process of every replica, the lines naming
// run id (at most 200 each): what delivered its thread, when, and what failed.
func logRunLines(t *testing.T, replicas []*chaosReplica, id string) {
	t.Helper()
	for _, r := range replicas {
		for i, p := range r.procs {
			var lines []string
			for _, l := range strings.Split(p.Logs(), "\n") {
				if strings.Contains(l, id) && len(lines) < 200 {
					lines = append(lines, l)
				}
			}
			t.Logf("replica %s, process %d: %d lines of run %s:\n%s", r.name, i+1, len(lines), id, strings.Join(lines, "\n"))
		}
	}
}

// keepChaosLogs copies every replica process's whole log into the folder
// AUTOCAPTURE_KEEP_LOGS names, when it is set, as <replica>-<n>.log: the
// failure's own lines (logRunLines) name one run, and a thread's delay is
// often another process's doing.
func keepChaosLogs(t *testing.T, replicas []*chaosReplica) {
	dir := os.Getenv("AUTOCAPTURE_KEEP_LOGS")
	if dir == "" {
		return
	}
	for _, r := range replicas {
		for i, p := range r.procs {
			dst := filepath.Join(dir, fmt.Sprintf("%s-%d.log", r.name, i+1))
			if err := os.WriteFile(dst, []byte(p.Logs()), 0o644); err != nil {
				t.Errorf("AUTOCAPTURE_KEEP_LOGS: %v", err)
			}
		}
	}
	t.Logf("replica logs kept in %s", dir)
}
