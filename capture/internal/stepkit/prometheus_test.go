package stepkit

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/autocapture/autocapture/vocab"
)

// closedURL is an http URL on a loopback port nothing listens on.
func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

// TestDefaultPrometheusAbsentIsNotConfigured: nothing listening at the
// built-in default address is "not configured", said in words with the key
// to set; at an address the operator set, or with a Prometheus listening,
// the steps query it and a failure stays a failure.
func TestDefaultPrometheusAbsentIsNotConfigured(t *testing.T) {
	down := closedURL(t)
	_, err := PromAPIOf(&vocab.Endpoint{URL: down, Default: true})
	what, ok := vocab.IsNotConfigured(err)
	if !ok {
		t.Fatalf("default Prometheus %s down: %v, want not configured", down, err)
	}
	want := "no Prometheus answers at " + down + " (prometheus.url): tier 1 used the instance's own /metrics"
	if what != want {
		t.Errorf("not configured %q, want %q", what, want)
	}
	if strings.Contains(what, "dial tcp") || strings.Contains(what, "connection refused") {
		t.Errorf("%q speaks Go's dialer, not words", what)
	}

	if _, err := PromAPIOf(&vocab.Endpoint{URL: down}); err != nil {
		t.Errorf("configured Prometheus %s: %v, want its API (its queries fail, red)", down, err)
	}
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	if _, err := PromAPIOf(&vocab.Endpoint{URL: srv.URL, Default: true}); err != nil {
		t.Errorf("default Prometheus listening at %s: %v, want its API", srv.URL, err)
	}
}
