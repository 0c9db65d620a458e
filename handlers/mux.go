package handlers

import (
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"go.uber.org/zap"
)

// The plumbing around the routes: what every answer goes through (the
// request log, panics, the answers the mux gives on its own) on plain
// net/http.

// route serves r through the mux, answering in our JSON error shape what the
// mux does not route: 404, or 405 with its Allow.
func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	// A path that is not clean (`//`, `/./`, `/../`) is not found: the mux
	// would redirect it elsewhere, and a `..` must never be resolved into
	// another run's or key's URL.
	if p := r.URL.EscapedPath(); p != cleanPath(p) {
		s.notFound(w, r)
		return
	}
	h, pattern := s.mux.Handler(r)
	if pattern != "" {
		s.mux.ServeHTTP(w, r)
		return
	}
	if s.redirectTrailingSlash(w, r) {
		return
	}
	// The mux's own answer (404, or 405 with Allow) says which; its text body
	// is dropped.
	var probe probeWriter
	h.ServeHTTP(&probe, r)
	if probe.code != http.StatusMethodNotAllowed {
		s.notFound(w, r)
		return
	}
	w.Header().Set("Allow", probe.header.Get("Allow"))
	fail(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not allowed on "+r.URL.Path)
}

func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	fail(w, http.StatusNotFound, "not_found", "no route "+r.URL.Path)
}

// redirectTrailingSlash sends `/runs/` to `/runs` when only the latter is
// routed for r's method (301 for GET, 307 otherwise so the body is sent
// again), and says whether it did.
func (s *Server) redirectTrailingSlash(w http.ResponseWriter, r *http.Request) bool {
	if len(r.URL.Path) < 2 || !strings.HasSuffix(r.URL.Path, "/") {
		return false
	}
	// Clean paths only reach here, so the target cannot start with `//`
	// (another host).
	to := &url.URL{Path: strings.TrimSuffix(r.URL.Path, "/"), RawPath: strings.TrimSuffix(r.URL.RawPath, "/"),
		RawQuery: r.URL.RawQuery}
	r2 := r.WithContext(r.Context())
	r2.URL = to
	if _, pattern := s.mux.Handler(r2); pattern == "" {
		return false
	}
	code := http.StatusTemporaryRedirect
	if r.Method == http.MethodGet {
		code = http.StatusMovedPermanently
	}
	http.Redirect(w, r, to.String(), code)
	return true
}

// cleanPath is p as the mux would route it: rooted, without `.`, `..` or
// repeated slashes, keeping a trailing slash.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// probeWriter keeps the code and header of an answer and drops its body.
type probeWriter struct {
	header http.Header
	code   int
}

func (p *probeWriter) Header() http.Header {
	if p.header == nil {
		p.header = http.Header{}
	}
	return p.header
}

func (p *probeWriter) WriteHeader(code int) {
	if p.code == 0 {
		p.code = code
	}
}

func (p *probeWriter) Write(b []byte) (int, error) {
	p.WriteHeader(http.StatusOK)
	return len(b), nil
}

// statusWriter notes the code and size of the answer passing through it.
type statusWriter struct {
	http.ResponseWriter
	code int // 0: nothing written yet
	size int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 && code >= 200 { // a 1xx is not the answer
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.size += n
	return n, err
}

// Unwrap lets http.ResponseController reach the connection (write deadlines, flushes).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// status is the code answered; a handler that wrote nothing answered 200.
func (w *statusWriter) status() int {
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}

// writeJSON answers code with v as JSON.
func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil { // only a type that cannot be encoded: a bug
		code, b = http.StatusInternalServerError, []byte(`{"status":"error","error":"internal","reason":"internal error"}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// logRequests logs each request once it is answered: the polled endpoints at
// debug, the rest at info (warn for 5xx).
func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		defer func() { // deferred: a request cut short by a panic is logged too
			code, path := sw.status(), r.URL.Path
			level := zap.InfoLevel
			switch {
			case code >= 500:
				level = zap.WarnLevel
			case code < 400 && (path == "/-/healthy" || path == "/-/ready" || path == "/metrics"):
				level = zap.DebugLevel
			}
			if ce := s.log.Check(level, "HTTP request answered."); ce != nil {
				ce.Write(zap.String("method", r.Method), zap.String("path", path),
					zap.Int("code", code), zap.Duration("took", time.Since(start)),
					zap.String("remote", clientIP(r)), zap.Int("bytes", sw.size))
			}
		}()
		next.ServeHTTP(sw, r)
	})
}

// recoverPanics answers a handler's panic with a 500 in the JSON error shape
// and logs it with its stack; the daemon goes on serving.
func (s *Server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler { // net/http cuts the connection quietly
				panic(v)
			}
			s.log.Error("HTTP handler panicked.", zap.String("method", r.Method), zap.String("path", r.URL.Path),
				zap.Any("panic", v), zap.Stack("stack"))
			if sw.code != 0 {
				// The answer has begun: cut the connection, so the client
				// cannot take a truncated body for a whole one.
				panic(http.ErrAbortHandler)
			}
			fail(sw, http.StatusInternalServerError, "internal", "internal error")
		}()
		next.ServeHTTP(sw, r)
	})
}

// clientIP is the peer's address: the TCP connection's, never what a
// forwarded-for header claims (the auth-failure logs must name the peer).
func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(strings.TrimSpace(r.RemoteAddr))
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.String()
	}
	return ""
}
