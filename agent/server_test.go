package agent

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

const testToken = "s3cr3t-agent-token"

type served struct {
	fx  fixture
	srv *Server
	url string
	reg *prometheus.Registry
}

func serveFixture(t *testing.T, o ServerOptions) served {
	t.Helper()
	fx := newFixture(t)
	o.Dir, o.Token = Dir{Path: fx.dir}, testToken
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	s, err := NewServerWith(o)
	must(t, err)
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	return served{fx: fx, srv: s, url: hs.URL, reg: o.Registry}
}

func request(t *testing.T, method, url, auth string, h ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	must(t, err)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	for i := 0; i+1 < len(h); i += 2 {
		req.Header.Set(h[i], h[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	must(t, err)
	return resp, b
}

func TestNewServerRefusesNoToken(t *testing.T) {
	dir := t.TempDir()
	for _, tok := range []string{"", " \n"} {
		if _, err := NewServer(Dir{Path: dir}, tok); err == nil || !strings.Contains(err.Error(), "token is empty") {
			t.Errorf("token %q: %v, want a refusal", tok, err)
		}
	}
	if _, err := NewServer(Dir{Path: filepath.Join(dir, "missing")}, "t"); err == nil {
		t.Error("a missing folder was accepted")
	}
}

func TestServerAuth(t *testing.T) {
	s := serveFixture(t, ServerOptions{})
	routes := []struct{ method, path string }{
		{"GET", "/v1/files"}, {"GET", "/v1/files/a.pt.trace.json.gz"}, {"DELETE", "/v1/files/a.pt.trace.json.gz"},
	}
	auths := map[string]string{
		"absent":       "",
		"basic":        "Basic dXNlcjpwYXNz",
		"wrong token":  "Bearer " + testToken + "x",
		"prefix":       "Bearer " + testToken[:5],
		"bare token":   testToken,
		"empty bearer": "Bearer ",
	}
	for _, rt := range routes {
		for name, auth := range auths {
			t.Run(rt.method+" "+rt.path+" "+name, func(t *testing.T) {
				resp, b := request(t, rt.method, s.url+rt.path, auth)
				if resp.StatusCode != http.StatusUnauthorized {
					t.Fatalf("%d, want 401: %s", resp.StatusCode, b)
				}
				var e errorBody
				if err := json.Unmarshal(b, &e); err != nil || e.Error != "unauthorized" || e.Reason == "" {
					t.Errorf("answer %s, want JSON error unauthorized with a reason", b)
				}
				if !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("WWW-Authenticate %q", resp.Header.Get("WWW-Authenticate"))
				}
			})
		}
	}
	if _, err := os.Stat(filepath.Join(s.fx.dir, "a.pt.trace.json.gz")); err != nil {
		t.Errorf("an unauthenticated DELETE removed the file: %v", err)
	}
	for _, p := range []string{"/healthz", "/metrics"} {
		if resp, b := request(t, "GET", s.url+p, ""); resp.StatusCode != 200 {
			t.Errorf("%s without auth: %d %s", p, resp.StatusCode, b)
		}
	}
	if v := testutil.ToFloat64(s.srv.metrics.errors.WithLabelValues("unauthorized")); v != float64(len(routes)*len(auths)) {
		t.Errorf("unauthorized errors counted %v, want %d", v, len(routes)*len(auths))
	}
	must(t, os.RemoveAll(s.fx.dir))
	if resp, _ := request(t, "GET", s.url+"/healthz", ""); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("healthz with the folder gone: %d, want 503", resp.StatusCode)
	}
}

// TestServerRefusesEscapes sends each way out, raw and percent-encoded, with
// the right token: every one is a 404 that carries no byte of the outside
// file, and DELETE removes nothing.
func TestServerRefusesEscapes(t *testing.T) {
	s := serveFixture(t, ServerOptions{})
	paths := []string{"..%2Fsecret.txt", "%2e%2e/secret.txt", "sub%2F..%2F..%2Fsecret.txt", "sub/%2e%2e/%2e%2e/secret.txt",
		"%2Fetc%2Fpasswd", "%2F" + strings.TrimPrefix(strings.ReplaceAll(s.fx.outside, "/", "%2F"), "%2F"),
		"out-link", "up-link/secret.txt", "sub", "fifo", "nope.txt", ""}
	for _, p := range paths {
		for _, m := range []string{"GET", "DELETE"} {
			resp, b := request(t, m, s.url+"/v1/files/"+p, "Bearer "+testToken)
			if resp.StatusCode != http.StatusNotFound || strings.Contains(string(b), "outside") {
				t.Errorf("%s %s: %d %q, want 404", m, p, resp.StatusCode, b)
			}
		}
	}
	if b, err := os.ReadFile(s.fx.outside); err != nil || string(b) != "outside" {
		t.Errorf("the outside file changed: %q %v", b, err)
	}
	for _, keep := range []string{"sub", "fifo", "out-link", "up-link", "a.pt.trace.json.gz"} {
		if _, err := os.Lstat(filepath.Join(s.fx.dir, keep)); err != nil {
			t.Errorf("%s was removed: %v", keep, err)
		}
	}
}

func TestServerServesFiles(t *testing.T) {
	s := serveFixture(t, ServerOptions{})
	auth := "Bearer " + testToken
	path := filepath.Join(s.fx.dir, "sub", "b.txt")
	st, err := os.Stat(path)
	must(t, err)

	resp, b := request(t, "GET", s.url+"/v1/files/sub/b.txt", auth)
	if resp.StatusCode != 200 || string(b) != "table-b" {
		t.Fatalf("GET: %d %q", resp.StatusCode, b)
	}
	if got := resp.Header.Get("Content-Length"); got != "7" {
		t.Errorf("Content-Length %q, want 7", got)
	}
	if got, want := resp.Header.Get("Last-Modified"), st.ModTime().UTC().Format(http.TimeFormat); got != want {
		t.Errorf("Last-Modified %q, want %q", got, want)
	}
	if resp.Header.Get("Content-Encoding") != "" {
		t.Errorf("Content-Encoding %q: a .gz must pass through as bytes", resp.Header.Get("Content-Encoding"))
	}
	if resp, b = request(t, "HEAD", s.url+"/v1/files/sub/b.txt", auth); resp.StatusCode != 200 || resp.ContentLength != 7 || len(b) != 0 {
		t.Errorf("HEAD: %d length %d body %q", resp.StatusCode, resp.ContentLength, b)
	}
	resp, b = request(t, "GET", s.url+"/v1/files/sub/b.txt", auth, "Range", "bytes=3-")
	if resp.StatusCode != http.StatusPartialContent || string(b) != "le-b" {
		t.Errorf("Range: %d %q, want 206 le-b", resp.StatusCode, b)
	}
	if resp, _ = request(t, "GET", s.url+"/v1/files/sub/b.txt", auth, "If-Modified-Since", resp.Header.Get("Last-Modified")); resp.StatusCode != http.StatusNotModified {
		t.Errorf("If-Modified-Since: %d, want 304", resp.StatusCode)
	}

	resp, b = request(t, "GET", s.url+"/v1/files?since="+s.fx.old.Add(time.Second).Format(time.RFC3339Nano), auth)
	var l Listing
	if err := json.Unmarshal(b, &l); err != nil || resp.StatusCode != 200 {
		t.Fatalf("list: %d %s", resp.StatusCode, b)
	}
	if got := names(l.Files); len(got) != 2 || got[0] != "a.pt.trace.json.gz" || got[1] != "sub/b.txt" {
		t.Errorf("list since: %v", got)
	}
	if d := time.Since(l.Now); d < 0 || d > time.Minute {
		t.Errorf("now %v is not the agent's clock", l.Now)
	}
	if resp, b = request(t, "GET", s.url+"/v1/files?since=yesterday", auth); resp.StatusCode != 400 || !strings.Contains(string(b), "bad_since") {
		t.Errorf("bad since: %d %s", resp.StatusCode, b)
	}

	if resp, b = request(t, "DELETE", s.url+"/v1/files/sub/b.txt", auth); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", resp.StatusCode, b)
	}
	if resp, _ = request(t, "GET", s.url+"/v1/files/sub/b.txt", auth); resp.StatusCode != 404 {
		t.Errorf("GET after DELETE: %d", resp.StatusCode)
	}
	m := s.srv.metrics
	for name, tt := range map[string]struct {
		c    prometheus.Collector
		want float64
	}{"files": {m.files, 2}, "bytes": {m.bytes, 7 + 4}, "removed": {m.removed, 1}, "not_found": {m.errors.WithLabelValues("not_found"), 1}} {
		if v := testutil.ToFloat64(tt.c); v != tt.want {
			t.Errorf("metric %s = %v, want %v", name, v, tt.want)
		}
	}
	resp, b = request(t, "GET", s.url+"/metrics", "")
	if !strings.Contains(string(b), "autocapture_agent_bytes_served_total 11") {
		t.Errorf("/metrics lacks the bytes served:\n%s", b)
	}
}

// TestServerCutsAStalledStream: a reader that stops reading is cut after the
// stall timeout (counted as stream_cut), instead of holding the file open.
func TestServerCutsAStalledStream(t *testing.T) {
	s := serveFixture(t, ServerOptions{StallTimeout: 200 * time.Millisecond})
	big := filepath.Join(s.fx.dir, "big.bin")
	f, err := os.Create(big)
	must(t, err)
	must(t, f.Truncate(256<<20)) // sparse: no disk written
	f.Close()
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	must(t, err)
	defer conn.Close()
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4096)
	}
	_, err = io.WriteString(conn, "GET /v1/files/big.bin HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+testToken+"\r\n\r\n")
	must(t, err)
	cut := s.srv.metrics.errors.WithLabelValues("stream_cut")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for testutil.ToFloat64(cut) == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("a stalled stream was never cut")
		case <-time.After(20 * time.Millisecond):
		}
	}
	if sent := testutil.ToFloat64(s.srv.metrics.bytes); sent >= 256<<20 {
		t.Errorf("sent %v bytes to a reader that read none", sent)
	}
}
