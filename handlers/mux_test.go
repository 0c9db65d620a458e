package handlers

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/autocapture/autocapture/runner/runs"
)

// TestUnroutedAnswersInOurShape: what no route serves is answered in the
// JSON error shape, never the mux's text: a wrong method on a known route is
// 405 with the route's Allow, an unknown or unclean path is 404 (no redirect
// to another path), and a trailing slash is sent to the route without it.
func TestUnroutedAnswersInOurShape(t *testing.T) {
	h := newHarness(t, withToken("tok"))
	tests := []struct {
		name, method, path string
		code               int
		word, allow, loc   string
	}{
		{name: "GET a POST route", method: "GET", path: "/api/v1/runs/r1/cancel", code: 405, word: "method_not_allowed", allow: "POST"},
		{name: "GET the reload", method: "GET", path: "/-/reload", code: 405, word: "method_not_allowed", allow: "POST, PUT"},
		{name: "DELETE a page", method: "DELETE", path: "/runs/r1", code: 405, word: "method_not_allowed", allow: "GET, HEAD"},
		{name: "PUT the webhook", method: "PUT", path: "/hooks/alertmanager", code: 405, word: "method_not_allowed", allow: "POST"},
		{name: "unknown path", method: "GET", path: "/api/v2/runs", code: 404, word: "not_found"},
		{name: "unknown path, unknown method", method: "PATCH", path: "/nope", code: 404, word: "not_found"},
		{name: "root", method: "GET", path: "/", code: 404, word: "not_found"},
		{name: "parent segment", method: "GET", path: "/api/v1/runs/r1/../r2", code: 404, word: "not_found"},
		{name: "doubled slash", method: "GET", path: "//api/v1/runs", code: 404, word: "not_found"},
		{name: "dot segment", method: "GET", path: "/api/v1/./runs", code: 404, word: "not_found"},
		{name: "trailing slash, GET", method: "GET", path: "/api/v1/runs/?limit=2", code: 301, loc: "/api/v1/runs?limit=2"},
		{name: "trailing slash, POST", method: "POST", path: "/hooks/alertmanager/", code: 307, loc: "/hooks/alertmanager"},
		{name: "trailing slash on no route", method: "GET", path: "/api/v2/runs/", code: 404, word: "not_found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := h.do(tt.method, tt.path, nil, bearer("tok"))
			if rec.Code != tt.code {
				t.Fatalf("code %d, want %d: %s", rec.Code, tt.code, rec.Body)
			}
			if got := rec.Header().Get("Allow"); got != tt.allow {
				t.Errorf("Allow %q, want %q", got, tt.allow)
			}
			if got := rec.Header().Get("Location"); got != tt.loc {
				t.Errorf("Location %q, want %q", got, tt.loc)
			}
			if tt.word == "" {
				return
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json; charset=utf-8" {
				t.Errorf("Content-Type %q", ct)
			}
			checkErrorBody(t, rec.Body.Bytes(), tt.word)
		})
	}
}

// TestRequestLogLine: each answer is logged once with its method, path,
// code, the peer's address (not a forwarded-for header's) and its size.
func TestRequestLogLine(t *testing.T) {
	h := newHarness(t, nil)
	rec := h.do("GET", "/api/v2/runs", nil, http.Header{"X-Forwarded-For": {"203.0.113.9"}})
	lines := h.logs.FilterMessage("HTTP request answered.").All()
	if len(lines) != 1 {
		t.Fatalf("%d request log lines, want 1", len(lines))
	}
	f := lines[0].ContextMap()
	if f["method"] != "GET" || f["path"] != "/api/v2/runs" || f["code"] != int64(404) ||
		f["remote"] != "192.0.2.1" || f["bytes"] != int64(rec.Body.Len()) || lines[0].Level != zapcore.InfoLevel {
		t.Errorf("log line %s %v, want GET /api/v2/runs 404 from 192.0.2.1 with %d bytes at info", lines[0].Level, f, rec.Body.Len())
	}
}

// panickyRuns panics where a run is read, as a bug in the run service would.
type panickyRuns struct{ *fakeRuns }

func (panickyRuns) Get(context.Context, string) (*runs.Run, error) { panic("run service bug") }

// TestHandlerPanicIsA500: a handler's panic is answered 500 in the JSON
// error shape, logged with its stack, and the daemon goes on serving.
func TestHandlerPanicIsA500(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.Runs = panickyRuns{o.Runs.(*fakeRuns)} })
	rec := h.do("GET", "/api/v1/runs/r1", nil, nil)
	if rec.Code != http.StatusInternalServerError {
		t.Fatalf("code %d, want 500: %s", rec.Code, rec.Body)
	}
	checkErrorBody(t, rec.Body.Bytes(), "internal")
	logged := h.logs.FilterMessage("HTTP handler panicked.").All()
	if len(logged) != 1 {
		t.Fatalf("%d panic log lines, want 1", len(logged))
	}
	if f := logged[0].ContextMap(); f["panic"] != "run service bug" || f["path"] != "/api/v1/runs/r1" || f["stack"] == "" {
		t.Errorf("panic logged as %v", f)
	}
	if warn := h.logs.FilterMessage("HTTP request answered.").FilterField(zap.Int("code", 500)).All(); len(warn) != 1 || warn[0].Level != zapcore.WarnLevel {
		t.Errorf("the 500 is logged as %v, want once at warn", warn)
	}
	if rec := h.do("GET", "/-/healthy", nil, nil); rec.Code != http.StatusOK {
		t.Errorf("after the panic /-/healthy answered %d", rec.Code)
	}
}

// TestPanicAfterTheAnswerBegan: a panic once the status line is out cuts
// the connection, so the client sees a broken body, not a short one that
// reads as whole.
func TestPanicAfterTheAnswerBegan(t *testing.T) {
	h := newHarness(t, nil)
	half := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("the first half"))
		_ = http.NewResponseController(w).Flush()
		panic("mid-stream bug")
	})
	srv := httptest.NewServer(h.srv.logRequests(h.srv.recoverPanics(half)))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || err == nil {
		t.Fatalf("code %d, body %q, read error %v: want 200 then a cut connection", resp.StatusCode, b, err)
	}
	if n := h.logs.FilterMessage("HTTP handler panicked.").Len(); n != 1 {
		t.Errorf("%d panic log lines, want 1", n)
	}
}
