package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/targets"
	"github.com/autocapture/autocapture/vocab"
)

// allowListPlaybook scrapes the alert's instance and GETs its /version, both
// through the targets allow-list, then triages.
const allowListPlaybook = `playbooks:
  - name: e2e-allowlist
    match: ['alertname="AllowListProbe"']
    timeout: 1m
    steps:
      - id: scrape
        timeout: 10s
        continue_on_error: true
        scrape: {gap: 1s}
      - id: version
        timeout: 10s
        continue_on_error: true
        http: {path: /version}
      - id: triage
        triage: {}
`

// allowed is the test's whole allow-list: one loopback address that is not the
// one 127.0.0.1 and localhost lead to.
const allowed = "127.0.0.2/32"

// lookedUp is the daemon's targets.names: localhost may be looked up (to
// be refused on its address), any other name is refused before a lookup.
const lookedUp = "localhost"

// countingServer is an HTTP server on addr that counts the connections it saw.
type countingServer struct {
	Addr  string
	conns atomic.Int64
}

func startCounting(t *testing.T, addr string) *countingServer {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	c := &countingServer{Addr: ln.Addr().String()}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			fmt.Fprintln(w, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\",engine=\"0\"} 0")
		case "/version":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintln(w, `{"version":"0.0.0-e2e"}`)
		default:
			http.NotFound(w, r)
		}
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			c.conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return c
}

// TestAllowListRefusesBeforeConnecting: alerts whose instance points at another
// host, the cloud metadata address, an IPv6 link-local address, a loopback
// address not on the list, or a name resolving to one, are refused by the
// allow-list before any connection: the scrape and http steps fail with reason
// refused, their error (and the http step's `refused` finding) names the
// address and the rule, and the listener behind the refused loopback address
// saw no connection, while the allowed address's listener did.
func TestAllowListRefusesBeforeConnecting(t *testing.T) {
	t.Parallel()
	outside := startCounting(t, "127.0.0.1:0")
	inside := startCounting(t, "127.0.0.2:0")
	_, port, _ := net.SplitHostPort(outside.Addr)
	rows := []struct {
		name, instance string
		why            string // what the refusal must say
		allowed        bool
	}{
		{"another host", "10.1.2.3:8000", "10.1.2.3:8000 is not on the allow-list", false},
		{"cloud metadata", "169.254.169.254:80", "169.254.169.254:80 is link-local, a cloud metadata address (AWS IMDS, GCP, Azure, OpenStack, Oracle), and no entry names it exactly", false},
		{"IPv6 link-local", "[fe80::1]:8000", "[fe80::1]:8000 is link-local", false},
		{"loopback not listed", outside.Addr, outside.Addr + " is not on the allow-list", false},
		{"name resolving outside", "localhost:" + port, "localhost resolves to ", false},
		{"name never looked up", "exfil-label-secret.attacker.example:80", "refused before any DNS lookup", false},
		{"allowed loopback (control)", inside.Addr, "", true},
	}
	guardNoOffHostTraffic(t, []string{"10.1.2.3:8000", "169.254.169.254:80", "[fe80::1]:8000", "exfil-label-secret.attacker.example:80"})

	s := startDaemon(t, []string{allowed}, allowListPlaybook)
	ids := map[string]string{}
	for i, row := range rows {
		a := firingAlert("AllowListProbe", row.instance, fmt.Sprintf("a110%012x", i))
		ids[row.name] = acceptedRun(t, postWebhook(t, s.API, a)[0])
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			r := s.waitRun(t, ids[row.name], time.Minute)
			if row.allowed {
				checkAllowedRun(t, r)
				return
			}
			checkRefusedRun(t, r, row.why)
		})
	}
	if n := outside.conns.Load(); n != 0 {
		t.Errorf("the listener on %s (not on the allow-list) saw %d connections, want 0", outside.Addr, n)
	}
	if n := inside.conns.Load(); n == 0 {
		t.Errorf("the listener on %s (allowed) saw no connection: the counting proves nothing", inside.Addr)
	}
	t.Logf("connections: %s (refused) %d, %s (allowed) %d", outside.Addr, outside.conns.Load(), inside.Addr, inside.conns.Load())
}

// guardNoOffHostTraffic refuses to go on unless this tree's allow-list, with
// the test's config, refuses every address before a request: a regression
// must fail here, not send a packet off this machine.
func guardNoOffHostTraffic(t *testing.T, hostports []string) {
	t.Helper()
	p, err := targets.New(config.Targets{Allow: []string{allowed}, Names: []string{lookedUp}}, targets.Options{Log: zap.NewNop(),
		LookupIP: func(_ context.Context, host string) ([]netip.Addr, error) {
			if host != lookedUp {
				t.Fatalf("the allow-list looked up %q in-process: not posting it to the daemon", host)
			}
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	for _, hp := range hostports {
		err := p.CheckURL(context.Background(), &url.URL{Scheme: "http", Host: hp, Path: "/metrics"})
		if vocab.Classify(err) != vocab.ReasonRefused {
			t.Fatalf("the allow-list does not refuse %s in-process (%v): not posting it to the daemon", hp, err)
		}
	}
}

func checkRefusedRun(t *testing.T, r *runs.Run, why string) {
	t.Helper()
	inst := r.Labels["instance"]
	for _, id := range []string{"scrape", "version"} {
		st := stepByID(r, id)
		checkOneLineFailure(t, r, st, []string{string(vocab.ReasonRefused)}, why)
		if !strings.Contains(r.Reason, id+" (refused)") {
			t.Errorf("run reason %q does not list %s (refused)", r.Reason, id)
		}
	}
	ver := stepByID(r, "version")
	if f, _ := ver.Findings["refused"].(string); !strings.Contains(f, why) {
		t.Errorf("http step finding refused = %q, want it to say %q", f, why)
	}
	if !strings.Contains(ver.Summary, inst) && !strings.Contains(ver.Summary, strings.Trim(inst, "[]")) {
		t.Errorf("http step summary %q does not name %s", ver.Summary, inst)
	}
	if r.Status != vocab.StatusPartial {
		t.Errorf("run %s, want partial (triage still answers): %s", r.Status, describe(r))
	}
	t.Logf("%s: %s", inst, stepByID(r, "scrape").Error)
}

func checkAllowedRun(t *testing.T, r *runs.Run) {
	t.Helper()
	for _, id := range []string{"scrape", "version", "triage"} {
		if st := stepByID(r, id); st.Status != vocab.StatusSucceeded {
			t.Errorf("allowed target: step %s %s (%s %s), want succeeded", id, st.Status, st.Reason, st.Error)
		}
	}
}

// startDaemon starts the autocapture binary alone: no Prometheus or trace
// backend behind it (its Prometheus URL is a dead loopback port), the given
// allow-list, and one playbook file.
func startDaemon(t *testing.T, allow []string, playbook string) *stack {
	t.Helper()
	return startDaemonOn(t, testenv.FreePort(t), allow, playbook)
}

// startDaemonOn is startDaemon listening on 127.0.0.1:port.
func startDaemonOn(t *testing.T, port int, allow []string, playbook string) *stack {
	t.Helper()
	s := &stack{Dir: t.TempDir(), Sims: map[string]*sim{}}
	pb := filepath.Join(s.Dir, "playbook.yaml")
	if err := os.WriteFile(pb, []byte(playbook), 0o644); err != nil {
		t.Fatal(err)
	}
	s.API = fmt.Sprintf("http://127.0.0.1:%d", port)
	cfg := fmt.Sprintf(`web:
  listen_address: 127.0.0.1:%d
  auth:
    bearer_token: %s
storage:
  path: %s
prometheus:
  url: http://127.0.0.1:%d
targets:
  allow: [%s]
  names: [%s]
playbooks: [%s]
`, port, token, filepath.Join(s.Dir, "data"), testenv.FreePort(t), strings.Join(allow, ", "), lookedUp, pb)
	s.launch(t, cfg)
	return s
}

// TestBroadAllowListStillRefusesMetadataAndSelf: under allow entries that
// admit everything (0.0.0.0/0, ::/0), the real daemon still refuses, before
// any connection, the metadata endpoints outside link-local, every other
// spelling of 169.254.169.254, and its own API; the allowed loopback control
// is reached.
func TestBroadAllowListStillRefusesMetadataAndSelf(t *testing.T) {
	t.Parallel()
	inside := startCounting(t, "127.0.0.2:0")
	port := testenv.FreePort(t)
	self := fmt.Sprintf("127.0.0.1:%d", port)
	rows := []struct {
		name, instance, why string
		allowed             bool
	}{
		{"Alibaba metadata", "100.100.100.200:80", "100.100.100.200:80 is a cloud metadata address (Alibaba Cloud ECS metadata)", false},
		{"AWS IMDS over IPv6", "[fd00:ec2::254]:80", "[fd00:ec2::254]:80 is a cloud metadata address (AWS IMDS over IPv6)", false},
		{"NAT64 spelling", "[64:ff9b::a9fe:a9fe]:80", "is 169.254.169.254 in another spelling", false},
		{"IPv4-mapped spelling", "[::ffff:169.254.169.254]:80", "link-local, a cloud metadata address (AWS IMDS", false},
		{"the daemon's own API", self, self + " is this daemon's own API", false},
		{"allowed loopback (control)", inside.Addr, "", true},
	}
	broad := []string{"0.0.0.0/0", "::/0"}
	guard, err := targets.New(config.Targets{Allow: broad}, targets.Options{Log: zap.NewNop(), DaemonAddress: self})
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range rows[:4] { // a regression must fail here, not send a packet off this machine
		if err := guard.CheckURL(context.Background(), &url.URL{Scheme: "http", Host: row.instance, Path: "/metrics"}); vocab.Classify(err) != vocab.ReasonRefused {
			t.Fatalf("the allow-list does not refuse %s in-process (%v): not posting it to the daemon", row.instance, err)
		}
	}
	s := startDaemonOn(t, port, broad, allowListPlaybook)
	ids := map[string]string{}
	for i, row := range rows {
		a := firingAlert("AllowListProbe", row.instance, fmt.Sprintf("b10ad%011x", i))
		ids[row.name] = acceptedRun(t, postWebhook(t, s.API, a)[0])
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			r := s.waitRun(t, ids[row.name], time.Minute)
			if row.allowed {
				checkAllowedRun(t, r)
				return
			}
			checkRefusedRun(t, r, row.why)
		})
	}
	if n := inside.conns.Load(); n == 0 {
		t.Errorf("the allowed listener on %s saw no connection: the test proves nothing", inside.Addr)
	}
}
