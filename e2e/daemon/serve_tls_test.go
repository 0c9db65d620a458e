package daemon

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/internal/testkit/webtlstest"
	"github.com/autocapture/autocapture/runner/runs"
)

// tlsSetup is a CA, the daemon's server pair for 127.0.0.1 and client
// certificates: alice from the same CA, mallory from another.
type tlsSetup struct {
	dir, caFile, certFile, keyFile string
	ca                             *webtlstest.CA
	pool                           *x509.CertPool
	alice, mallory                 tls.Certificate
	aliceCert, aliceKey            string
}

func newTLSSetup(t *testing.T) *tlsSetup {
	t.Helper()
	s := &tlsSetup{dir: t.TempDir(), ca: webtlstest.NewCA(t, "autocapture test CA")}
	s.caFile = s.ca.WriteCA(t, s.dir, "ca.crt")
	s.certFile, s.keyFile = s.ca.Server(t, "autocapture").Write(t, s.dir, "server")
	s.aliceCert, s.aliceKey = s.ca.Client(t, "alice").Write(t, s.dir, "alice")
	mc, mk := webtlstest.NewCA(t, "another CA").Client(t, "mallory").Write(t, s.dir, "mallory")
	s.alice, s.mallory = keyPair(t, s.aliceCert, s.aliceKey), keyPair(t, mc, mk)
	s.pool = x509.NewCertPool()
	s.pool.AppendCertsFromPEM(s.ca.CertPEM)
	return s
}

func keyPair(t *testing.T, cert, key string) tls.Certificate {
	t.Helper()
	c, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// clientConfig trusts the test CA and presents certs. The first is sent
// whatever CAs the server names as acceptable (crypto/tls would otherwise
// send none from another CA, and the server's verification would go untested).
func (s *tlsSetup) clientConfig(certs ...tls.Certificate) *tls.Config {
	tc := &tls.Config{RootCAs: s.pool, MinVersion: tls.VersionTLS12}
	if len(certs) > 0 {
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &certs[0], nil }
	}
	return tc
}

// client is a fresh client (no connection reuse) with tc.
func client(tc *tls.Config) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc, DisableKeepAlives: true}}
}

// startTLSDaemon starts the daemon with webTLS (lines under web:, indented
// two spaces) and waits for /-/ready over TLS as alice.
func startTLSDaemon(t *testing.T, s *tlsSetup, o *daemonOpts, webTLS string) (*daemon, string) {
	t.Helper()
	o.Web = webTLS
	d := launchDaemon(t, o, "autocapture")
	d.URL = fmt.Sprintf("https://127.0.0.1:%d", o.Port)
	c := client(s.clientConfig(s.alice))
	waitFor(t, 30*time.Second, "/-/ready over TLS", func() bool {
		if d.Proc.Exited() {
			t.Fatalf("daemon exited:\n%s", d.Proc.Logs())
		}
		resp, err := c.Get(d.URL + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return d, d.Config
}

// call sends method path with body as c, with token when not empty.
func call(c *http.Client, method, url, token string, body []byte) (int, []byte, error) {
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if len(body) > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, nil
}

// servedSerial is the serial of the certificate a new connection gets.
func servedSerial(t *testing.T, s *tlsSetup, d *daemon) string {
	t.Helper()
	conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", d.Port), s.clientConfig(s.alice))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// TestServeTLSMutual: a listener with a client CA (require_and_verify by
// default) and a bearer token. The right CA, client certificate and token
// get a run; plain HTTP, no client certificate, one from another CA and TLS
// 1.1 are refused; the certificate's CN is who paused profiling; the token
// is still needed with a certificate; the healthcheck probes it; a rotated
// certificate is served after SIGHUP, a broken one is not.
func TestServeTLSMutual(t *testing.T) {
	t.Parallel()
	s := newTLSSetup(t)
	o := &daemonOpts{Token: "tls-token"}
	d, cfgPath := startTLSDaemon(t, s, o, fmt.Sprintf("  tls:\n    cert_file: %q\n    key_file: %q\n    client_ca_file: %q\n",
		s.certFile, s.keyFile, s.caFile))
	alice := client(s.clientConfig(s.alice))
	hook := d.URL + "/hooks/alertmanager"
	if !strings.Contains(d.Proc.Logs(), `"links_to": "`+d.URL+`"`) {
		t.Errorf("artifact links without web.external_url do not point at %s:\n%s", d.URL, d.Proc.Logs())
	}
	body := webhookBody("TLSFiring", "7150000000000001", "firing", time.Now().Add(-time.Minute))

	code, b, err := call(alice, "POST", hook, d.Token, body)
	if err != nil || code != 200 || runID(b) == "" {
		t.Fatalf("webhook over mTLS: %d %s %v", code, b, err)
	}
	code, b, err = call(alice, "GET", d.URL+"/api/v1/runs?alertname=TLSFiring", d.Token, nil)
	var page runs.Page
	if err != nil || code != 200 || json.Unmarshal(b, &page) != nil || len(page.Runs) != 1 {
		t.Fatalf("runs over mTLS: %d %s %v", code, b, err)
	}

	t.Run("the token is still required", func(t *testing.T) {
		if code, b, err := call(alice, "POST", hook, "", body); err != nil || code != 401 {
			t.Fatalf("certificate without token: %d %s %v, want 401", code, b, err)
		}
	})
	t.Run("the CN is who paused", func(t *testing.T) {
		code, b, err := call(alice, "POST", d.URL+"/api/v1/profiling/pause", d.Token, []byte(`{"reason":"tls test"}`))
		var st runs.ProfilingStatus
		if err != nil || code != 200 || json.Unmarshal(b, &st) != nil || st.PausedBy != "alice" {
			t.Fatalf("pause: %d %s %v, want paused_by alice", code, b, err)
		}
		if code, b, err := call(alice, "POST", d.URL+"/api/v1/profiling/resume", d.Token, nil); err != nil || code != 200 {
			t.Fatalf("resume: %d %s %v", code, b, err)
		}
	})
	refused := []struct {
		name string
		c    *http.Client
		want string
	}{
		{"no client certificate", client(s.clientConfig()), "certificate required"},
		{"a certificate from another CA", client(s.clientConfig(s.mallory)), "unknown certificate authority"},
		{"TLS 1.1", client(&tls.Config{RootCAs: s.pool, Certificates: []tls.Certificate{s.alice},
			MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}), "protocol version"},
		{"an unknown server CA", client(&tls.Config{Certificates: []tls.Certificate{s.alice}}), "certificate signed by unknown authority"},
	}
	for _, r := range refused {
		t.Run(r.name, func(t *testing.T) {
			code, b, err := call(r.c, "POST", hook, d.Token, body)
			if err == nil || !strings.Contains(err.Error(), r.want) {
				t.Fatalf("got %d %s, err %v; want the handshake refused (%q)", code, b, err, r.want)
			}
		})
	}
	t.Run("plain HTTP", func(t *testing.T) {
		code, b, err := call(http.DefaultClient, "POST", strings.Replace(hook, "https://", "http://", 1), d.Token, body)
		if err == nil && (code != 400 || !bytes.Contains(b, []byte("HTTPS server"))) {
			t.Fatalf("plain HTTP to the TLS port: %d %s, want refused", code, b)
		}
	})
	// Nothing refused above reached the webhook: one delivery answered, the first.
	if code, b, err := call(alice, "GET", d.URL+"/metrics", d.Token, nil); err != nil || code != 200 ||
		!bytes.Contains(b, []byte("autocapture_webhooks_total{code=\"200\"} 1\n")) || bytes.Contains(b, []byte("autocapture_webhooks_total{code=\"401\"} 2")) {
		t.Fatalf("after the refusals: %d %v, webhooks %s", code, err, grepLines(b, "autocapture_webhooks_total"))
	}

	t.Run("healthcheck", func(t *testing.T) {
		url := d.URL + "/-/healthy"
		withCert := []string{"--tls.cert-file", s.aliceCert, "--tls.key-file", s.aliceKey}
		ok := [][]string{
			append([]string{"--config.file", cfgPath}, withCert...), // the config's own certificate pinned
			append([]string{"--url", url, "--tls.ca-file", s.caFile}, withCert...),
			append([]string{"--url", url, "--tls.insecure-skip-verify"}, withCert...),
		}
		for _, args := range ok {
			if code, out, errOut := healthcheck(t, args...); code != 0 || !strings.Contains(out, "200") {
				t.Errorf("%q: exit %d, %q %q", args, code, out, errOut)
			}
		}
		if code, _, errOut := healthcheck(t, "--url", url, "--tls.ca-file", s.caFile); code != 1 {
			t.Errorf("no client certificate: exit %d %q, want 1", code, errOut)
		}
		if code, _, errOut := healthcheck(t, append([]string{"--url", url}, withCert...)...); code != 1 || !strings.Contains(errOut, "unknown authority") {
			t.Errorf("system roots: exit %d %q, want 1", code, errOut)
		}
		if code, _, errOut := healthcheck(t, "--url", "https://example.invalid/-/healthy", "--tls.insecure-skip-verify"); code != 2 || !strings.Contains(errOut, "loopback") {
			t.Errorf("skip-verify off loopback: exit %d %q, want 2", code, errOut)
		}
	})

	t.Run("rotation on SIGHUP", func(t *testing.T) {
		before := servedSerial(t, s, d)
		next := s.ca.Server(t, "autocapture")
		next.Write(t, s.dir, "server")
		if err := syscall.Kill(d.Proc.Pid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		want := next.Cert.SerialNumber.String()
		waitFor(t, 10*time.Second, "the new serial "+want, func() bool { return servedSerial(t, s, d) == want })
		if before == want {
			t.Fatal("the serials are the same")
		}
		if code, b, err := call(alice, "POST", hook, d.Token, body); err != nil || code != 200 {
			t.Fatalf("webhook after the rotation: %d %s %v", code, b, err)
		}
		// A broken pair (another key) is refused; the rotated one stays served.
		if err := os.WriteFile(s.keyFile, s.ca.Server(t, "x").KeyPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(d.Proc.Pid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "the failed reload logged", func() bool {
			return strings.Contains(d.Proc.Logs(), "Cannot reload the TLS certificate")
		})
		if got := servedSerial(t, s, d); got != want {
			t.Fatalf("after a broken rotation the serial is %s, want %s still", got, want)
		}
	})
}

// TestServeTLSAlertmanager: a real Alertmanager sends to the https webhook
// with the README's http_config (tls_config with the CA and a client
// certificate, and the bearer token), and the run appears.
func TestServeTLSAlertmanager(t *testing.T) {
	t.Parallel()
	s := newTLSSetup(t)
	d, _ := startTLSDaemon(t, s, &daemonOpts{Token: "am-tls"}, fmt.Sprintf("  tls:\n    cert_file: %q\n    key_file: %q\n    client_ca_file: %q\n",
		s.certFile, s.keyFile, s.caFile))
	am := testenv.StartAlertmanager(t, fmt.Sprintf(`route:
  receiver: autocapture
  group_wait: 1s
  group_interval: 1s
receivers:
  - name: autocapture
    webhook_configs:
      - url: %s/hooks/alertmanager
        http_config:
          authorization:
            credentials: %s
          tls_config:
            ca_file: %s
            cert_file: %s
            key_file: %s
            min_version: TLS12
`, d.URL, d.Token, s.caFile, s.aliceCert, s.aliceKey))
	am.PostAlerts(t, testenv.PostableAlert{Labels: map[string]string{"alertname": "TLSFromAM", "instance": "127.0.0.1:8000"},
		StartsAt: time.Now().Add(-time.Minute)})
	alice := client(s.clientConfig(s.alice))
	waitFor(t, 30*time.Second, "the run of TLSFromAM", func() bool {
		code, b, err := call(alice, "GET", d.URL+"/api/v1/runs?alertname=TLSFromAM", d.Token, nil)
		var page runs.Page
		return err == nil && code == 200 && json.Unmarshal(b, &page) == nil && len(page.Runs) == 1
	})
}

// TestServeTLSClientCertAuthenticates: with client_cert_authenticates and
// client_auth request, a verified certificate is enough without the token;
// without a certificate the token still is.
func TestServeTLSClientCertAuthenticates(t *testing.T) {
	t.Parallel()
	s := newTLSSetup(t)
	d, _ := startTLSDaemon(t, s, &daemonOpts{Token: "cert-or-token"}, fmt.Sprintf(
		"  tls:\n    cert_file: %q\n    key_file: %q\n    client_ca_file: %q\n    client_auth: request\n    client_cert_authenticates: true\n",
		s.certFile, s.keyFile, s.caFile))
	runsURL := d.URL + "/api/v1/runs"
	anonymous := client(s.clientConfig())
	for _, c := range []struct {
		name  string
		c     *http.Client
		token string
		want  int
	}{
		{"certificate, no token", client(s.clientConfig(s.alice)), "", 200},
		{"token, no certificate", anonymous, d.Token, 200},
		{"neither", anonymous, "", 401},
		{"wrong token, no certificate", anonymous, "nope", 401},
	} {
		if code, b, err := call(c.c, "GET", runsURL, c.token, nil); err != nil || code != c.want {
			t.Errorf("%s: %d %s %v, want %d", c.name, code, b, err, c.want)
		}
	}
	if _, _, err := call(client(s.clientConfig(s.mallory)), "GET", runsURL, "", nil); err == nil {
		t.Error("a certificate from another CA was accepted in request mode")
	}
}

// TestServeTLSStartupErrors: a bad web.tls stops serve at once with the key
// at fault.
func TestServeTLSStartupErrors(t *testing.T) {
	t.Parallel()
	s := newTLSSetup(t)
	for _, c := range []struct{ name, tls, want string }{
		{"cert without key", fmt.Sprintf("    cert_file: %q\n", s.certFile), "web.tls.cert_file: set without key_file"},
		{"unreadable key", fmt.Sprintf("    cert_file: %q\n    key_file: %q\n", s.certFile, filepath.Join(s.dir, "missing.key")), "web.tls.key_file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := filepath.Join(t.TempDir(), "c.yaml")
			y := fmt.Sprintf("web:\n  listen_address: 127.0.0.1:%d\n  tls:\n%sstorage:\n  path: %q\n", testenv.FreePort(t), c.tls, t.TempDir())
			if err := os.WriteFile(cfg, []byte(y), 0o644); err != nil {
				t.Fatal(err)
			}
			if code, _, errOut := runBinary(t, "serve", "--config.file", cfg); code != 1 || !strings.Contains(errOut, c.want) {
				t.Fatalf("exit %d, stderr %q; want 1 and %q", code, errOut, c.want)
			}
		})
	}
}

// grepLines is the lines of b holding sub.
func grepLines(b []byte, sub string) string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
