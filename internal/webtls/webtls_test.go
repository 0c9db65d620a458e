package webtls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/internal/testkit/webtlstest"
)

// serve starts a TLS listener with s and returns a function giving the
// serial a new connection sees.
func serve(t *testing.T, s *Server, ca *webtlstest.CA) func() string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tln := tls.NewListener(ln, s.Config())
	t.Cleanup(func() { tln.Close() })
	go func() {
		for {
			c, err := tln.Accept()
			if err != nil {
				return
			}
			go func() { _ = c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	return func() string {
		c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool})
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
}

// TestWatchReloadsOnFileChange: replacing the files is enough (no Reload
// call, no signal): the next connection gets the new certificate; a
// mismatched pair written later is logged and the good one stays.
func TestWatchReloadsOnFileChange(t *testing.T) {
	dir := t.TempDir()
	ca := webtlstest.NewCA(t, "ca")
	cert, key := ca.Server(t, "one").Write(t, dir, "server")
	core, logs := observer.New(zap.InfoLevel)
	s, err := New(config.TLS{CertFile: cert, KeyFile: key}, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	s.Debounce = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watching := make(chan error, 1)
	go func() { watching <- s.Watch(ctx) }()
	serial := serve(t, s, ca)
	first := serial()

	time.Sleep(100 * time.Millisecond) // let the watch be registered
	next := ca.Server(t, "two")
	next.Write(t, dir, "server")
	want := next.Cert.SerialNumber.String()
	deadline := time.Now().Add(10 * time.Second)
	for serial() != want {
		if time.Now().After(deadline) {
			t.Fatalf("still serving %s (first %s), want %s", serial(), first, want)
		}
		time.Sleep(20 * time.Millisecond)
	}

	if err := os.WriteFile(key, ca.Server(t, "three").KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	for logs.FilterMessageSnippet("Cannot reload").Len() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("a mismatched pair was not reported")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := serial(); got != want {
		t.Fatalf("after a broken write the serial is %s, want %s", got, want)
	}
	cancel()
	if err := <-watching; err != nil {
		t.Fatal(err)
	}
}

// TestNewRefusesAndWarns: a missing key is an error naming key_file; a key
// others may read is a warning.
func TestNewRefusesAndWarns(t *testing.T) {
	dir := t.TempDir()
	cert, key := webtlstest.NewCA(t, "ca").Server(t, "s").Write(t, dir, "server")
	if _, err := New(config.TLS{CertFile: cert, KeyFile: dir + "/nope.key"}, zap.NewNop()); err == nil || !strings.Contains(err.Error(), "key_file") {
		t.Fatalf("missing key: %v", err)
	}
	if err := os.Chmod(key, 0o644); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.WarnLevel)
	if _, err := New(config.TLS{CertFile: cert, KeyFile: key}, zap.New(core)); err != nil {
		t.Fatal(err)
	}
	if logs.FilterMessageSnippet("can be read by every user").Len() != 1 {
		t.Fatalf("no warning for a 0644 key: %v", logs.All())
	}
}
