package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// TestServeFaultPostgresFailover: the daemon reaches PostgreSQL through a
// proxy that fails over twice while runs are being written: first every
// connection is reset at once (mid-transaction: steps persisting, outbox
// rows, River's fetches) and connecting is refused for 1.5 s while more
// alerts arrive; then every backend of the database is killed with
// pg_terminate_backend. Alerts answered other than 200 are sent again, as
// Alertmanager does. No run is lost or doubled (one run per alert), every
// run reaches a final status, every thread is whole and none doubled.
func TestServeFaultPostgresFailover(t *testing.T) {
	const alerts, refuse = 20, 1500 * time.Millisecond
	dsn := testenv.StartPostgres(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.StartTCPProxy(t, u.Host)
	via := *u
	via.Host = proxy.Addr
	stub := newSlack(t)
	target := &slowTarget{hits: map[string]int{}, slowHit: make(chan struct{}, alerts)}
	web := httptest.NewServer(target)
	defer web.Close()
	d := startDaemon(t, &daemonOpts{Token: "pg", DatabaseURL: via.String(), Playbooks: slackPlaybook(web.URL), Notify: slackNotify(stub) + "    pace: {per_second: 50, burst: 20}\n"})
	start := time.Now().Add(-time.Minute)
	fp := func(i int) string { return fmt.Sprintf("fa11%012d", i) }
	refused := map[int]int{} // the webhook's answers other than 200, by code
	for i := range alerts / 2 {
		postUntilAccepted(t, d, webhookBody("E2ESlack", fp(i), "firing", start), refused)
	}
	select {
	case <-target.slowHit:
	case <-time.After(30 * time.Second):
		t.Fatal("no run reached its slow step")
	}
	inFlight := d.metric(t, "autocapture_runs_executing")
	before := proxy.Accepted()
	cut := proxy.Refuse(t, refuse)
	cutAt := time.Now()
	storeDown := d.metric(t, "autocapture_runs_store_up")
	for i := alerts / 2; i < alerts; i++ {
		postUntilAccepted(t, d, webhookBody("E2ESlack", fp(i), "firing", start), refused)
	}
	time.Sleep(2 * time.Second)
	terminated := terminateBackends(t, dsn, u.Path[1:])
	t.Logf("cut %d connections with %v runs executing; %d backends terminated 2 s after the second half of the alerts; "+
		"autocapture_runs_store_up %v during the refusal; webhook answers other than 200 by code %v", cut, inFlight, terminated, storeDown, refused)
	if cut == 0 || terminated == 0 {
		t.Fatalf("cut %d connections, terminated %d backends: the test proves nothing", cut, terminated)
	}
	if storeDown != 0 {
		t.Errorf("autocapture_runs_store_up %v while PostgreSQL refused connections, want 0", storeDown)
	}
	for code := range refused {
		if code != http.StatusServiceUnavailable {
			t.Errorf("the webhook answered %d while PostgreSQL was away, want only 503 (Alertmanager retries it): %v", code, refused)
		}
	}

	byFP := map[string]int{}
	waitFor(t, 90*time.Second, "every alert's run to reach a final status", func() bool {
		list, ok := tryRuns(d, "E2ESlack")
		if !ok {
			return false
		}
		clear(byFP)
		final := 0
		for _, r := range list {
			byFP[r.Fingerprint]++
			if r.Status != vocab.StatusQueued && r.Status != vocab.StatusRunning {
				final++
			}
		}
		return final == len(list) && len(list) >= alerts
	})
	recovered := time.Since(cutAt)
	statuses := map[string]int{}
	list := d.runsN(t, "E2ESlack")
	for _, r := range list {
		statuses[string(r.Status)]++
	}
	for i := range alerts {
		if byFP[fp(i)] != 1 {
			t.Errorf("alert %s has %d runs, want 1", fp(i), byFP[fp(i)])
		}
	}
	if len(list) != alerts {
		t.Errorf("%d runs for %d alerts", len(list), alerts)
	}
	want := []string{"step/slack-thread/fast", "step/slack-thread/slow", "close/finished"}
	waitThreads(t, stub, alerts, "close/finished", 60*time.Second)
	resumed := 0
	for _, r := range list {
		checkThreadWithResumes(t, replyKeys(threadOf(t, stub, r.ID)), r, want)
		resumed += r.Resumed
	}
	if n := len(stub.Messages(slackChannel)); n != alerts {
		t.Errorf("%d parents in the channel, want %d", n, alerts)
	}
	if up := d.metric(t, "autocapture_runs_store_up"); up != 1 {
		t.Errorf("autocapture_runs_store_up %v after the failover, want 1", up)
	}
	// What the on-call sees is that the daemon said the database was away;
	// which words it used depends on what was in flight at the cut (no
	// query running: no "reset", only "refused" on the next connect), so
	// the kinds are reported, not required.
	logged := databaseLogLines(d)
	total := 0
	for _, n := range logged {
		total += n
	}
	if total == 0 {
		t.Errorf("the daemon logged no warning or error about the database through two failovers")
	}
	t.Logf("all %d runs final %v after the cut: %v, %d resumes; the daemon opened %d connections after the cut; its warnings and errors about the database %v",
		alerts, recovered.Round(100*time.Millisecond), statuses, resumed, proxy.Accepted()-before, logged)
}

// checkThreadWithResumes checks a run's thread: the keys of want once each
// in that order, and between them the run's resumes (run/resumed/1 … n,
// n = r.Resumed) once each, nothing else.
func checkThreadWithResumes(t *testing.T, keys []string, r runs.Run, want []string) {
	t.Helper()
	var rest []string
	seen := map[string]int{}
	for _, k := range keys {
		if strings.HasPrefix(k, "run/resumed/") {
			seen[k]++
			continue
		}
		rest = append(rest, k)
	}
	ok := strings.Join(rest, " ") == strings.Join(want, " ") && len(seen) == r.Resumed
	for i := 1; i <= r.Resumed; i++ {
		ok = ok && seen[fmt.Sprintf("run/resumed/%d", i)] == 1
	}
	if !ok {
		t.Errorf("run %s (%s, resumed %d): thread %v, want %v each once in order, and each resume once", r.ID, r.Status, r.Resumed, keys, want)
	}
}

// postUntilAccepted posts body until the daemon answers 200 (as
// Alertmanager retries a failed notification), counting the other answers
// by code in refused (0 for a failed connection).
func postUntilAccepted(t *testing.T, d *daemon, body []byte, refused map[int]int) {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	deadline := time.Now().Add(40 * time.Second)
	for {
		req, _ := http.NewRequest("POST", d.URL+"/hooks/alertmanager", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+d.Token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		code := 0
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && runID(b) != "" {
				return
			}
			code, err = resp.StatusCode, fmt.Errorf("%d %s", resp.StatusCode, b)
		}
		refused[code]++
		if time.Now().After(deadline) {
			t.Fatalf("the webhook still fails after 40 s: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// tryRuns lists up to 500 runs of alertname; false while the API fails.
func tryRuns(d *daemon, alertname string) ([]runs.Run, bool) {
	req, _ := http.NewRequest("GET", d.URL+"/api/v1/runs?limit=500&alertname="+alertname, nil)
	req.Header.Set("Authorization", "Bearer "+d.Token)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	var page runs.Page
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&page) != nil {
		return nil, false
	}
	return page.Runs, true
}

// terminateBackends kills every backend connected to dbname (the daemon's,
// whatever it is doing) from a direct connection and returns how many.
func terminateBackends(t *testing.T, dsn, dbname string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin := strings.Replace(dsn, "/"+dbname+"?", "/postgres?", 1)
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	err = conn.QueryRow(ctx, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = $1 AND pid <> pg_backend_pid()) AS killed`, dbname).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// databaseLogLines counts the daemon's warnings and errors about the lost
// database, by what they say: connections reset mid-use, connecting refused,
// backends terminated by the administrator (SQLSTATE 57P01).
func databaseLogLines(d *daemon) map[string]int {
	kinds := map[string]string{"reset": "connection reset", "refused": "connection refused", "eof": "EOF",
		"terminated": "57P01", "lease": "renew a run's lease"}
	n := map[string]int{}
	for _, line := range strings.Split(d.Proc.Logs(), "\n") {
		if !strings.Contains(line, "\tWARN\t") && !strings.Contains(line, "\tERROR\t") {
			continue
		}
		for kind, text := range kinds {
			if strings.Contains(line, text) {
				n[kind]++
			}
		}
	}
	return n
}
