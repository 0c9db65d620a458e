package main

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
)

func healthcheck(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = dispatch(append([]string{"healthcheck"}, args...), &o, &e)
	return code, o.String(), e.String()
}

// TestHealthcheckAnswers: 2xx is healthy (exit 0); an error status, no
// listener or a server slower than --timeout is not (exit 1, the reason on
// stderr); bad usage is 2.
func TestHealthcheckAnswers(t *testing.T) {
	var status atomic.Int32
	status.Store(http.StatusOK)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			time.Sleep(2 * time.Second)
		}
		w.WriteHeader(int(status.Load()))
		fmt.Fprint(w, "store down")
	}))
	defer srv.Close()

	if code, out, errOut := healthcheck("--url", srv.URL+"/-/healthy"); code != 0 || !strings.Contains(out, "200") {
		t.Fatalf("healthy server: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	status.Store(http.StatusServiceUnavailable)
	if code, _, errOut := healthcheck("--url", srv.URL+"/-/healthy"); code != 1 || !strings.Contains(errOut, "503") || !strings.Contains(errOut, "store down") {
		t.Fatalf("503: exit %d, stderr %q", code, errOut)
	}
	status.Store(http.StatusOK)
	if code, _, errOut := healthcheck("--url", srv.URL+"/slow", "--timeout", "200ms"); code != 1 || !strings.Contains(errOut, "deadline") {
		t.Fatalf("slower than --timeout: exit %d, stderr %q", code, errOut)
	}
	closed := fmt.Sprintf("http://127.0.0.1:%d/-/healthy", testenv.FreePort(t))
	if code, _, errOut := healthcheck("--url", closed); code != 1 || !strings.Contains(errOut, "refused") {
		t.Fatalf("nothing listening: exit %d, stderr %q", code, errOut)
	}
	for _, args := range [][]string{{"--url", "ftp://x/"}, {"--url", "127.0.0.1:9095"}, {"--timeout", "0s"}, {"extra"}, {"--nope"}} {
		if code, _, _ := healthcheck(args...); code != 2 {
			t.Errorf("%q: exit %d, want 2 (usage)", args, code)
		}
	}
}

// TestHealthcheckFollowsTheConfig: without --url the probe goes to
// /-/healthy on the config's web.listen_address, a wildcard host on loopback.
func TestHealthcheckFollowsTheConfig(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var path atomic.Value
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { path.Store(r.URL.Path) })}
	go srv.Serve(ln) //nolint:errcheck // closed below
	defer srv.Close()
	port := ln.Addr().(*net.TCPAddr).Port

	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("s3cret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "autocapture.yaml")
	yaml := fmt.Sprintf("web:\n  listen_address: 0.0.0.0:%d\n  auth:\n    bearer_token_file: %s\n", port, token)
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := healthcheck("--config.file", cfg); code != 0 || path.Load() != "/-/healthy" {
		t.Fatalf("exit %d (%q %q), path %v", code, out, errOut, path.Load())
	}
	if code, _, errOut := healthcheck("--config.file", filepath.Join(dir, "missing.yaml")); code != 2 || !strings.Contains(errOut, "missing.yaml") {
		t.Fatalf("missing config: exit %d, stderr %q", code, errOut)
	}
	for addr, want := range map[string]string{
		"0.0.0.0:9095":  "http://127.0.0.1:9095/-/healthy",
		":9095":         "http://127.0.0.1:9095/-/healthy",
		"[::]:9095":     "http://[::1]:9095/-/healthy",
		"10.1.2.3:8080": "http://10.1.2.3:8080/-/healthy",
	} {
		if got, err := healthURL(addr, false); err != nil || got != want {
			t.Errorf("healthURL(%q) = %q, %v; want %q", addr, got, err, want)
		}
	}
}
