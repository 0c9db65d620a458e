package daemon

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// crashPlaybook has a fast tier-1 step and a slow tier-2 step against target.
func crashPlaybook(target string) string { return twoStepPlaybook("crash-resume", "E2ECrash", target) }

// twoStepPlaybook is playbook name for alertname: a fast tier-1 step and a
// slow tier-2 step against target.
func twoStepPlaybook(name, alertname, target string) string {
	return fmt.Sprintf(`playbooks:
  - name: %[2]s
    match:
      - alertname="%[3]s"
    steps:
      - id: fast
        http: {url: "%[1]s/fast"}
      - id: slow
        tier: 2
        timeout: 30s
        http: {url: "%[1]s/slow"}
`, target, name, alertname)
}

// TestServeResumesAfterKill9: kill -9 while the slow step runs, restart on the
// same store: the run completes once, resumed within 60 s, from the last
// completed step (the fast step is not repeated), and the killed process's
// River job is counted orphaned. For SQLite and PostgreSQL.
func TestServeResumesAfterKill9(t *testing.T) {
	tests := []struct {
		name     string
		postgres bool
	}{
		{name: "sqlite"},
		{name: "postgres", postgres: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := &slowTarget{hits: map[string]int{}, slowHit: make(chan struct{}, 1)}
			srv := httptest.NewServer(target)
			defer srv.Close()
			o := &daemonOpts{Token: "crash", Playbooks: crashPlaybook(srv.URL), LeaseTimeout: killLease}
			if tt.postgres {
				o.DatabaseURL = testenv.StartPostgres(t)
			}
			id := killMidStep(t, o, target, webhookBody("E2ECrash", "deadbeefdeadbeef", "firing", time.Now().Add(-time.Minute)))
			killed := time.Now()

			d2 := startDaemon(t, o) // same port, storage and database
			var r runs.Run
			waitFor(t, 60*time.Second, "the run to finish after the restart", func() bool {
				r = d2.run(t, id)
				return r.Status != vocab.StatusQueued && r.Status != vocab.StatusRunning
			})
			t.Logf("run finished %v after kill -9: %+v", time.Since(killed).Round(100*time.Millisecond), r)
			if r.Status != vocab.StatusSucceeded || r.Resumed != 1 {
				t.Fatalf("run %+v, want succeeded after exactly one resume", r)
			}
			done := map[string]int{}
			for _, s := range r.Steps {
				done[s.ID]++
			}
			if done["fast"] != 1 || done["slow"] != 1 || len(r.Steps) != 2 {
				t.Errorf("step records %+v, want fast and slow once each", r.Steps)
			}
			if n := target.count("/fast"); n != 1 {
				t.Errorf("fast step requested %d times, want 1 (resume from the last completed step)", n)
			}
			if n := target.count("/slow"); n != 2 {
				t.Errorf("slow step requested %d times, want 2 (interrupted, then completed)", n)
			}
			if runs := d2.runs(t, "E2ECrash"); len(runs) != 1 {
				t.Errorf("%d runs after the restart, want 1", len(runs))
			}
			// The killed process's job of the run stays running until River's
			// rescuer, an hour later; the run went on under a new job.
			if n := d2.metric(t, "autocapture_river_jobs_orphaned"); n != 1 {
				t.Errorf("autocapture_river_jobs_orphaned %v after the resumed run finished, want 1 (the killed process's job)", n)
			}
		})
	}
}

// killMidStep starts a daemon with o, posts body, waits until its run is in
// target's slow step, and kills the daemon with SIGKILL. It returns the run id.
func killMidStep(t *testing.T, o *daemonOpts, target *slowTarget, body []byte) string {
	t.Helper()
	d := startDaemon(t, o)
	code, b := d.post(t, body)
	id := runID(b)
	if code != 200 || id == "" {
		t.Fatalf("webhook: %d %s", code, b)
	}
	select {
	case <-target.slowHit:
	case <-time.After(30 * time.Second):
		t.Fatalf("the slow step never started; run %+v", d.run(t, id))
	}
	d.Proc.Kill9()
	return id
}
