package agent

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// DefaultStallTimeout is how long a file stream may make no progress (the
// reader stopped reading) before the agent gives up on it.
const DefaultStallTimeout = time.Minute

// listTimeout bounds writing a listing.
const listTimeout = 30 * time.Second

// ServerOptions configure NewServerWith.
type ServerOptions struct {
	Dir Dir
	// Token is the bearer token every /v1 request must carry; never empty.
	Token string
	// Log receives one line per served, removed or refused request; nil: none.
	Log *zap.Logger
	// Registry receives the agent's metrics and is served on /metrics;
	// nil: a registry of the agent's metrics alone.
	Registry *prometheus.Registry
	// StallTimeout: a stream whose writes stop progressing this long is cut;
	// 0 means DefaultStallTimeout. There is no bound on a stream's total
	// time: hundreds of MB over a slow link are fine while they move.
	StallTimeout time.Duration
}

// Server serves a Dir over HTTP; see the package doc for the routes.
type Server struct {
	opts    ServerOptions
	token   [32]byte
	log     *zap.Logger
	metrics *metrics
	mux     *http.ServeMux
}

// NewServer serves dir to holders of token (which must not be empty).
func NewServer(dir Dir, token string) (http.Handler, error) {
	return NewServerWith(ServerOptions{Dir: dir, Token: token})
}

// NewServerWith is NewServer with metrics, logging and the stall timeout.
func NewServerWith(o ServerOptions) (*Server, error) {
	if strings.TrimSpace(o.Token) == "" {
		return nil, errors.New("agent: the token is empty: refusing to serve files without auth")
	}
	st, err := os.Stat(o.Dir.Path)
	if err != nil {
		return nil, errors.New("agent: folder: " + err.Error())
	}
	if !st.IsDir() {
		return nil, errors.New("agent: folder " + o.Dir.Path + " is not a directory")
	}
	if o.StallTimeout <= 0 {
		o.StallTimeout = DefaultStallTimeout
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	m, err := newMetrics(o.Registry)
	if err != nil {
		return nil, err
	}
	s := &Server{opts: o, token: sha256.Sum256([]byte(o.Token)), log: o.Log, metrics: m, mux: http.NewServeMux()}
	s.mux.HandleFunc("GET /v1/files", s.auth(s.list))
	s.mux.HandleFunc("GET /v1/files/{name...}", s.auth(s.get))
	s.mux.HandleFunc("DELETE /v1/files/{name...}", s.auth(s.remove))
	s.mux.HandleFunc("GET /healthz", s.healthz)
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(o.Registry, promhttp.HandlerOpts{Registry: o.Registry}))
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, http.StatusNotFound, "not_found", "no such route: "+r.Method+" "+r.URL.Path)
	})
	return s, nil
}

// ServeHTTP routes a request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// auth lets a request through when it carries the token, compared in
// constant time over digests (so the length does not leak either).
func (s *Server) auth(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		why := s.check(r.Header.Get("Authorization"))
		if why == "" {
			next(w, r)
			return
		}
		s.log.Warn("Request refused: not authenticated.", zap.String("path", r.URL.Path),
			zap.String("remote", r.RemoteAddr), zap.String("why", why))
		w.Header().Set("WWW-Authenticate", `Bearer realm="autocapture-agent"`)
		s.fail(w, http.StatusUnauthorized, "unauthorized", why)
	}
}

func (s *Server) check(h string) string {
	if h == "" {
		return "missing Authorization header: send Authorization: Bearer <token>"
	}
	scheme, cred, _ := strings.Cut(h, " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "not a bearer token: send Authorization: Bearer <token>"
	}
	d := sha256.Sum256([]byte(strings.TrimSpace(cred)))
	if subtle.ConstantTimeCompare(s.token[:], d[:]) != 1 {
		return "wrong bearer token"
	}
	return ""
}

// list answers the files modified at or after ?since= with the agent's clock.
func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	var since time.Time
	if v := r.URL.Query().Get("since"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			s.fail(w, http.StatusBadRequest, "bad_since", "since: want an RFC 3339 time such as 2026-12-01T10:00:00.5Z: "+err.Error())
			return
		}
		since = t
	}
	l, err := s.opts.Dir.Snapshot(r.Context(), since)
	if err != nil {
		s.log.Error("Listing failed.", zap.Error(err))
		s.fail(w, http.StatusInternalServerError, "list_failed", err.Error())
		return
	}
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(listTimeout))
	writeJSON(w, http.StatusOK, l)
}

// get streams one file with http.ServeContent: Content-Length,
// Last-Modified, Range and conditional requests, from the open file (never
// buffered whole). The stall deadline moves forward with every write.
func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	f, st, err := s.opts.Dir.open(name)
	if err != nil {
		s.fileError(w, "open", name, err)
		return
	}
	defer f.Close()
	begun := time.Now()
	sw := &stallWriter{ResponseWriter: w, rc: http.NewResponseController(w), stall: s.opts.StallTimeout}
	w.Header().Set("Cache-Control", "no-store")
	http.ServeContent(sw, r, path.Base(name), st.ModTime(), f)
	s.metrics.bytes.Add(float64(sw.n))
	log := s.log.With(zap.String("file", name), zap.Int64("bytes", sw.n), zap.Int64("size", st.Size()),
		zap.Duration("took", time.Since(begun)), zap.String("remote", r.RemoteAddr))
	switch {
	case sw.err != nil:
		s.metrics.errors.WithLabelValues("stream_cut").Inc()
		log.Warn("File stream cut short.", zap.Error(sw.err))
	case r.Method == http.MethodGet && (sw.code == http.StatusOK || sw.code == http.StatusPartialContent):
		s.metrics.files.Inc()
		log.Info("File served.", zap.Int("code", sw.code))
	}
}

// remove deletes one file.
func (s *Server) remove(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := s.opts.Dir.Remove(r.Context(), name); err != nil {
		s.fileError(w, "remove", name, err)
		return
	}
	s.metrics.removed.Inc()
	s.log.Info("File removed.", zap.String("file", name), zap.String("remote", r.RemoteAddr))
	w.WriteHeader(http.StatusNoContent)
}

// healthz is 200 while the folder can be read: a readiness probe.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	if st, err := os.Stat(s.opts.Dir.Path); err != nil || !st.IsDir() {
		s.fail(w, http.StatusServiceUnavailable, "folder_unavailable", "the profiler folder cannot be read")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) fileError(w http.ResponseWriter, op, name string, err error) {
	if errors.Is(err, ErrNotFound) {
		s.fail(w, http.StatusNotFound, "not_found", "no such file in the profiler folder: "+name)
		return
	}
	s.log.Error("File request failed.", zap.String("op", op), zap.String("file", name), zap.Error(err))
	s.fail(w, http.StatusInternalServerError, op+"_failed", err.Error())
}

// errorBody is every error answer, as the daemon's: a machine word and one line for people.
type errorBody struct {
	Status string `json:"status"`
	Error  string `json:"error"`
	Reason string `json:"reason"`
}

func (s *Server) fail(w http.ResponseWriter, code int, word, reason string) {
	s.metrics.errors.WithLabelValues(word).Inc()
	writeJSON(w, code, errorBody{Status: "error", Error: word, Reason: reason})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// stallWriter counts what is written and moves the connection's write
// deadline before each write: a stream is cut when it stops moving, never
// for being long.
type stallWriter struct {
	http.ResponseWriter
	rc    *http.ResponseController
	stall time.Duration
	code  int
	n     int64
	err   error
}

func (w *stallWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *stallWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.stall)) // unsupported in tests' recorders
	n, err := w.ResponseWriter.Write(p)
	w.n += int64(n)
	if err != nil && w.err == nil {
		w.err = err
	}
	return n, err
}

// Unwrap lets http.ResponseController reach the connection.
func (w *stallWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
