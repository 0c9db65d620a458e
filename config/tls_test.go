package config

import (
	"crypto/tls"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/autocapture/autocapture/internal/testkit/webtlstest"
)

// tlsFiles writes a server pair and a CA into a temp folder.
func tlsFiles(t *testing.T) (dir, cert, key, ca string) {
	t.Helper()
	dir = t.TempDir()
	authority := webtlstest.NewCA(t, "test CA")
	cert, key = authority.Server(t, "daemon").Write(t, dir, "server")
	return dir, cert, key, authority.WriteCA(t, dir, "ca.crt")
}

// TestTLSDefaults: a CA alone means require_and_verify, TLS 1.2 is the floor,
// and the parsed modes are what crypto/tls gets.
func TestTLSDefaults(t *testing.T) {
	_, cert, key, ca := tlsFiles(t)
	cases := []struct {
		name, extra string
		mode        tls.ClientAuthType
		min         uint16
	}{
		{"no client certs", "", tls.NoClientCert, tls.VersionTLS12},
		{"a CA requires them", fmt.Sprintf("    client_ca_file: %q\n", ca), tls.RequireAndVerifyClientCert, tls.VersionTLS12},
		{"request verifies a given one", fmt.Sprintf("    client_ca_file: %q\n    client_auth: request\n", ca), tls.VerifyClientCertIfGiven, tls.VersionTLS12},
		{"TLS 1.3 only", "    min_version: TLS1.3\n", tls.NoClientCert, tls.VersionTLS13},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			y := fmt.Sprintf("web:\n  tls:\n    cert_file: %q\n    key_file: %q\n%s", cert, key, c.extra)
			cfg, err := Parse("c.yaml", []byte(y))
			if err != nil {
				t.Fatal(err)
			}
			if !cfg.Web.TLS.Enabled() {
				t.Fatal("TLS not enabled")
			}
			if got := cfg.Web.TLS.TLSClientAuth(); got != c.mode {
				t.Errorf("client auth = %v, want %v", got, c.mode)
			}
			if got := cfg.Web.TLS.TLSMinVersion(); got != c.min {
				t.Errorf("min version = %x, want %x", got, c.min)
			}
		})
	}
	if Default().Web.TLS.Enabled() {
		t.Error("TLS on by default")
	}
}

// TestTLSRefused: each bad web.tls is a startup error at the key at fault.
func TestTLSRefused(t *testing.T) {
	dir, cert, key, ca := tlsFiles(t)
	other := webtlstest.NewCA(t, "other").Server(t, "other")
	_, otherKey := other.Write(t, dir, "other")
	notPEM := writeFile(t, dir, "junk.pem", "not a certificate\n")
	pair := func(extra string) string {
		return fmt.Sprintf("web:\n  tls:\n    cert_file: %q\n    key_file: %q\n%s", cert, key, extra)
	}
	checkParseErrors(t, []parseErrCase{
		{"cert without key", fmt.Sprintf("web:\n  tls:\n    cert_file: %q\n", cert), []string{"c.yaml:3:", "web.tls.cert_file: set without key_file"}},
		{"key without cert", fmt.Sprintf("web:\n  tls:\n    key_file: %q\n", key), []string{"web.tls.key_file: set without cert_file"}},
		{"missing cert", fmt.Sprintf("web:\n  tls:\n    cert_file: %q\n    key_file: %q\n", dir+"/nope.crt", key), []string{"web.tls.cert_file", "no such file"}},
		{"missing key", fmt.Sprintf("web:\n  tls:\n    cert_file: %q\n    key_file: %q\n", cert, dir+"/nope.key"), []string{"c.yaml:4:", "web.tls.key_file", "no such file"}},
		{"key not PEM", fmt.Sprintf("web:\n  tls:\n    cert_file: %q\n    key_file: %q\n", cert, notPEM), []string{"web.tls.key_file"}},
		{"key of another cert", fmt.Sprintf("web:\n  tls:\n    cert_file: %q\n    key_file: %q\n", cert, otherKey), []string{"web.tls", "private key does not match"}},
		{"CA not PEM", pair(fmt.Sprintf("    client_ca_file: %q\n", notPEM)), []string{"web.tls.client_ca_file", "no PEM certificate"}},
		{"CA missing", pair(fmt.Sprintf("    client_ca_file: %q\n", dir+"/nope")), []string{"web.tls.client_ca_file", "no such file"}},
		{"TLS 1.1", pair("    min_version: TLS1.1\n"), []string{"web.tls.min_version", "TLS1.2 or TLS1.3"}},
		{"unknown mode", pair(fmt.Sprintf("    client_ca_file: %q\n    client_auth: verify\n", ca)), []string{"web.tls.client_auth", "none, request or require_and_verify"}},
		{"require without CA", pair("    client_auth: require_and_verify\n"), []string{"web.tls.client_auth", "needs client_ca_file"}},
		{"CA with none", pair(fmt.Sprintf("    client_ca_file: %q\n    client_auth: none\n", ca)), []string{"remove one"}},
		{"cert auth without client certs", pair("    client_cert_authenticates: true\n"), []string{"web.tls.client_cert_authenticates"}},
		{"client CA without TLS", fmt.Sprintf("web:\n  tls:\n    client_ca_file: %q\n", ca), []string{"need TLS"}},
		{"off loopback, certificate not enough", "web:\n  listen_address: 0.0.0.0:9095\n" + strings.TrimPrefix(pair(fmt.Sprintf("    client_ca_file: %q\n", ca)), "web:\n"), []string{"without webhook auth"}},
	}, nil)
}

// TestTLSClientCertAuthenticates: off loopback, a required client certificate
// that is declared enough stands in for web.auth.
func TestTLSClientCertAuthenticates(t *testing.T) {
	_, cert, key, ca := tlsFiles(t)
	y := fmt.Sprintf("web:\n  listen_address: 0.0.0.0:9095\n  tls:\n    cert_file: %q\n    key_file: %q\n    client_ca_file: %q\n    client_cert_authenticates: true\n", cert, key, ca)
	cfg, err := Parse("c.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Web.ClientCertAuth() {
		t.Error("ClientCertAuth false")
	}
}

// TestTLSKeyFileWorldReadable is a warning the daemon logs, not a refusal.
func TestTLSKeyFileWorldReadable(t *testing.T) {
	_, cert, key, _ := tlsFiles(t)
	c := TLS{CertFile: cert, KeyFile: key}
	if c.KeyFileWorldReadable() {
		t.Fatal("0600 key reported world-readable")
	}
	if err := os.Chmod(key, 0o644); err != nil {
		t.Fatal(err)
	}
	if !c.KeyFileWorldReadable() {
		t.Fatal("0644 key not reported")
	}
	if _, err := Parse("c.yaml", []byte(fmt.Sprintf("web:\n  tls:\n    cert_file: %q\n    key_file: %q\n", cert, key))); err != nil {
		t.Fatalf("a 0644 key is refused: %v", err)
	}
}
