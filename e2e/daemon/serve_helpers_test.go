package daemon

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/runner/runs"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Which tests run in parallel (t.Parallel; scripts/test.sh runs four at a
// time): every one that owns the processes, ports and folders it uses, short
// or long: a sequential test keeps the others waiting for all of its
// start-ups and waits. The tests that kill a replica and reason about when the
// survivor takes its work over (the HA, kill -9, chaos and failover tests)
// stay sequential: their leases leave seconds of margin, and with a parallel
// sibling loading the machine one of them (TestServeProfileHAKill9/swept)
// saw the run resumed inside the window it models as the sweeper's alone.

// killLease is runs.lease_timeout for the tests that count exactly one
// resume across one kill -9. With the default 2 s (renewals every 500 ms,
// the watchdog at 1.5 s) CI's loaded machine had the restarted daemon's
// SQLite renewal miss the watchdog once while the profile step collected:
// the run was released and resumed a second time (correctly: the step's
// record was kept and not repeated), which is at-least-once across a lost
// lease, as designed, but not what these tests count. 5 s leaves renewals
// 4.5 s, as haLease does; the resume after a kill comes ≤ 3 s later.
const killLease = 5 * time.Second

// daemonOpts shape the config of a daemon under test.
type daemonOpts struct {
	// Dir is the storage.path; reuse it to restart on the same SQLite store.
	Dir string
	// Port is the listen port on 127.0.0.1; 0 picks one.
	Port int
	// Token is the webhook bearer token ("" disables auth).
	Token string
	// BasicAuth is web.auth.basic_auth as a flow map ({username: u,
	// password: p}), "" for none.
	BasicAuth string
	// Web is more of the web: section after its listen_address (indented two
	// spaces), "" for none.
	Web string
	// DatabaseURL selects PostgreSQL.
	DatabaseURL string
	// Playbooks is the playbook file's YAML; "" means none (runs end skipped),
	// so these tests do not depend on the shipped set's content.
	Playbooks string
	// Notify is the config's notify: section body (indented two spaces), "" for the default.
	Notify string
	// Storage is more of the storage: section after its path (indented two
	// spaces), "" for the default local backend.
	Storage string
	// Runs is more of the runs: section after the short lease settings
	// (indented two spaces), "" for none.
	Runs string
	// Profiling is the profiling: section body (indented two spaces), "" for
	// the default.
	Profiling string
	// LeaseTimeout is runs.lease_timeout; 0 means 2 s.
	LeaseTimeout time.Duration
	// Prometheus is the prometheus: section body (indented two spaces); ""
	// points it at a port nothing listens on.
	Prometheus string
	// Traces is the traces: section body (indented two spaces), "" for none.
	Traces string
	// More is more top-level sections (alertmanager:), "" for none.
	More string
}

// daemon is a running `autocapture serve`.
type daemon struct {
	URL   string
	Port  int
	Token string
	Proc  *testenv.Process
	// Config is the path of its config file.
	Config string
}

// writeDaemonConfig writes the config for o into o.Dir and returns its path.
// Unless o.Prometheus says otherwise, Prometheus points at a port nothing
// listens on: most tests here do not query it.
func writeDaemonConfig(t testing.TB, o *daemonOpts) string {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	if o.Port == 0 {
		o.Port = testenv.FreePort(t)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "web:\n  listen_address: 127.0.0.1:%d\n", o.Port)
	b.WriteString(o.Web)
	if o.Token != "" || o.BasicAuth != "" {
		b.WriteString("  auth:\n")
	}
	if o.Token != "" {
		fmt.Fprintf(&b, "    bearer_token: %q\n", o.Token)
	}
	if o.BasicAuth != "" {
		b.WriteString("    basic_auth: " + o.BasicAuth + "\n")
	}
	fmt.Fprintf(&b, "storage:\n  path: %q\n", o.Dir)
	b.WriteString(o.Storage)
	if o.DatabaseURL != "" {
		fmt.Fprintf(&b, "database:\n  url: %q\n", o.DatabaseURL)
	}
	prom := o.Prometheus
	if prom == "" {
		prom = fmt.Sprintf("  url: http://127.0.0.1:%d\n", testenv.FreePort(t))
	}
	b.WriteString("prometheus:\n" + prom)
	if o.Traces != "" {
		b.WriteString("traces:\n" + o.Traces)
	}
	lease := o.LeaseTimeout
	if lease == 0 {
		lease = 2 * time.Second
	}
	fmt.Fprintf(&b, "runs:\n  heartbeat_interval: 500ms\n  lease_timeout: %s\n  shutdown_grace: 3s\n", lease)
	b.WriteString(o.Runs)
	if o.Profiling != "" {
		b.WriteString("profiling:\n" + o.Profiling)
	}
	b.WriteString(o.More)
	b.WriteString("log:\n  level: debug\n")
	if o.Notify != "" {
		b.WriteString("notify:\n" + o.Notify)
	}
	pbs := o.Playbooks
	if pbs == "" {
		pbs = "playbooks: []\n"
	}
	pb := filepath.Join(o.Dir, "playbooks.yaml")
	if err := os.WriteFile(pb, []byte(pbs), 0o644); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "playbooks: [%q]\n", pb)
	path := filepath.Join(o.Dir, "autocapture.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// startDaemon builds (once) and starts the daemon and waits for /-/ready.
func startDaemon(t testing.TB, o *daemonOpts) *daemon {
	t.Helper()
	d := launchDaemon(t, o, "autocapture")
	d.Proc.WaitHTTP(t, d.URL+"/-/ready", 30*time.Second)
	return d
}

// launchDaemon builds (once) and starts the daemon for o, its process named
// name in the test's logs, without waiting for it to be ready.
func launchDaemon(t testing.TB, o *daemonOpts, name string) *daemon {
	t.Helper()
	cfg := writeDaemonConfig(t, o)
	bin := testenv.BuildBinary(t, "./cmd/autocapture")
	d := &daemon{URL: fmt.Sprintf("http://127.0.0.1:%d", o.Port), Port: o.Port, Token: o.Token, Config: cfg}
	d.Proc = testenv.StartProcess(t, name, exec.Command(bin, "serve", "--config.file", cfg))
	return d
}

// post sends a webhook body and returns the status code and body.
func (d *daemon) post(t testing.TB, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest("POST", d.URL+"/hooks/alertmanager", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return d.do(t, req)
}

func (d *daemon) do(t testing.TB, req *http.Request) (int, []byte) {
	t.Helper()
	if d.Token != "" && req.Header.Get("Authorization") == "" {
		req.Header.Set("Authorization", "Bearer "+d.Token)
	}
	return doRaw(t, req)
}

// doRaw sends req as it is.
func doRaw(t testing.TB, req *http.Request) (int, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// runs lists the runs of alertname through the API.
func (d *daemon) runs(t *testing.T, alertname string) []runs.Run {
	t.Helper()
	req, _ := http.NewRequest("GET", d.URL+"/api/v1/runs?alertname="+alertname, nil)
	code, b := d.do(t, req)
	if code != 200 {
		t.Fatalf("list runs: %d %s", code, b)
	}
	var page runs.Page
	if err := json.Unmarshal(b, &page); err != nil {
		t.Fatalf("list runs: %v: %s", err, b)
	}
	return page.Runs
}

// run gets one run with its steps.
func (d *daemon) run(t *testing.T, id string) runs.Run {
	t.Helper()
	req, _ := http.NewRequest("GET", d.URL+"/api/v1/runs/"+id, nil)
	code, b := d.do(t, req)
	if code != 200 {
		t.Fatalf("get run %s: %d %s", id, code, b)
	}
	var r runs.Run
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("get run: %v: %s", err, b)
	}
	return r
}

// waitFor polls cond every 100 ms until it holds; it fails the test with what
// after timeout (a bound on a liveness wait, not a speed check).
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v still waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// metric returns the value of one exact series line of /metrics, or -1.
func (d *daemon) metric(t *testing.T, series string) float64 {
	t.Helper()
	req, _ := http.NewRequest("GET", d.URL+"/metrics", nil)
	_, b := d.do(t, req)
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			var v float64
			fmt.Sscan(rest, &v)
			return v
		}
	}
	return -1
}

// webhookBody is a version-4 body with one alert.
func webhookBody(alertname, fingerprint, status string, startsAt time.Time) []byte {
	return []byte(fmt.Sprintf(`{"version":"4","groupKey":"{}:{}","status":%q,"receiver":"autocapture","alerts":[`+
		`{"status":%q,"labels":{"alertname":%q,"instance":"127.0.0.1:1"},"annotations":{},"startsAt":%q,`+
		`"endsAt":"0001-01-01T00:00:00Z","fingerprint":%q}]}`,
		status, status, alertname, startsAt.UTC().Format(time.RFC3339Nano), fingerprint))
}
