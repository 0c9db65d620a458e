// Package handlers is the daemon's HTTP surface: Alertmanager's webhook, the
// mount of Slack's interactivity (the verdict's right/wrong buttons; the
// endpoint itself is notify/slack's Interactions), the runs API, the
// artifacts threads link to, the routes of the run pages (package runpage
// renders them; here is who may read them and act from them), the
// Prometheus-style operational endpoints (/-/healthy, /-/ready, /-/reload,
// /metrics). It depends on the run service only through Runs.
package handlers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/alertmanager/template"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/internal/clip"
	slacknotify "github.com/autocapture/autocapture/notify/slack"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/runpage"
)

// Runs is what the HTTP surface needs of the run service, in the terms of
// package runs. *runner.Service satisfies it; tests use a fake.
type Runs interface {
	// Accept persists the alerts (one transaction) and returns one answer per
	// alert, in order. An error means nothing was stored: the webhook answers 503.
	Accept(ctx context.Context, alerts []template.Alert) ([]runs.Accepted, error)
	// List returns runs newest first; errors wrap runs.ErrBadCursor for a cursor
	// no page handed out.
	List(ctx context.Context, q runs.ListQuery) (runs.Page, error)
	// Get returns one run; errors wrap runs.ErrNotFound.
	Get(ctx context.Context, id string) (*runs.Run, error)
	// Cancel asks a run to stop; errors wrap runs.ErrNotFound or runs.ErrFinished.
	Cancel(ctx context.Context, id string) (*runs.Run, error)
	// Ping says whether the run store answers.
	Ping(ctx context.Context) error
}

// OutcomeRejected is the webhook's outcome for an alert refused on its own,
// before it reaches the run service (whose outcomes are runs.Outcomes).
const OutcomeRejected runs.Outcome = "rejected"

// Options configures New.
type Options struct {
	Runs Runs
	// Auth guards the webhook, the runs API and /-/reload when enabled; its
	// secrets must already be resolved (config.Load does that).
	Auth config.Auth
	// ClientCertAuth lets a verified TLS client certificate authenticate a
	// request without Auth's credential (web.tls.client_cert_authenticates).
	ClientCertAuth bool
	// MaxBodyBytes caps a webhook body (413 beyond); 0 means 1 MiB.
	MaxBodyBytes int64
	// Reload reloads the playbooks for POST /-/reload; nil answers 501.
	Reload func() error
	// Registry receives the webhook metrics and serves /metrics.
	Registry *prometheus.Registry
	// Registerer, when set, receives the metrics instead of Registry (a
	// wrapper of it that sees what is registered).
	Registerer prometheus.Registerer
	// AcceptTimeout bounds the store transaction of one webhook; 0 means 10 s.
	AcceptTimeout time.Duration
	// SlackSigningSecret (notify.slack.signing_secret, resolved) verifies
	// Slack's interactivity requests; empty leaves POST
	// /hooks/slack/interactions unregistered. It needs Feedback.
	SlackSigningSecret config.Secret
	// Feedback records the answers to a verdict's buttons (*runner.Service).
	Feedback Feedback
	// SlackActions, when set with a signing secret, takes the thread's
	// actions (Silence…, Unsilence); nil: their clicks are ignored.
	SlackActions *SlackActions
	// Profiling, when set, serves tier 3's kill switches (/api/v1/profiling,
	// /api/v1/runs/{id}/stop-profile and /profile); nil leaves them unregistered.
	Profiling Profiling
	// Artifacts, when set, serves GET/HEAD /artifacts/{run}/{key...} (the links in
	// threads); nil leaves the route unregistered.
	Artifacts *ArtifactOptions
	// PageLinks verifies the tokens of run-page links (the Slack parent's
	// "Run page" button): a valid one opens GET/HEAD /runs/{that id}, and
	// nothing else, without the API's credentials. nil: the pages take only
	// web.auth (and its trusted proxy).
	PageLinks PageLinkVerifier
	// Now is the clock Slack's request timestamps (and link tokens) are held
	// to; nil means time.Now.
	Now func() time.Time
	Log *zap.Logger
}

// Server is the HTTP surface; it is an http.Handler.
type Server struct {
	opts    Options
	metrics *Metrics
	mux     *http.ServeMux
	handler http.Handler // mux behind the middleware (route)
	auth    *authenticator
	proxy   *trustedProxy // nil: no web.auth.trusted_proxy
	slack   http.Handler  // nil: no interactivity
	pages   *runpage.Pages
	log     *zap.Logger
}

// New builds the HTTP surface and registers its metrics on o.Registry.
func New(o Options) (*Server, error) {
	if o.Runs == nil || o.Registry == nil || o.Log == nil {
		return nil, errors.New("handlers: Runs, Registry and Log are required")
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 1 << 20
	}
	if o.AcceptTimeout <= 0 {
		o.AcceptTimeout = 10 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if a := o.Artifacts; a != nil && (a.Runs == nil || a.Store == nil || a.Links == nil) {
		return nil, errors.New("handlers: the artifact route needs Runs, Store and Links")
	}
	if !o.SlackSigningSecret.Blank() && o.Feedback == nil {
		return nil, errors.New("handlers: a Slack signing secret needs Feedback to record the answers")
	}
	var reg prometheus.Registerer = o.Registry
	if o.Registerer != nil {
		reg = o.Registerer
	}
	m, err := NewMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("handlers: %w", err)
	}
	s := &Server{opts: o, metrics: m, auth: newAuthenticator(o.Auth, o.ClientCertAuth),
		proxy: newTrustedProxy(o.Auth.TrustedProxy), log: o.Log}
	if !o.SlackSigningSecret.Blank() {
		io := slacknotify.InteractionsOptions{SigningSecret: o.SlackSigningSecret,
			Feedback: slackFeedback{o.Feedback}, Registerer: reg, Now: o.Now, Log: o.Log}
		if a := o.SlackActions; a != nil && a.Actions != nil {
			io.Actions, io.Access, io.Token, io.APIURL = slackActions{a.Actions}, a.Access, a.Token, a.APIURL
		}
		s.slack, err = slacknotify.NewInteractions(io)
		if err != nil {
			return nil, fmt.Errorf("handlers: %w", err)
		}
	}
	if s.pages, err = s.newPages(reg); err != nil {
		return nil, fmt.Errorf("handlers: %w", err)
	}
	s.mux = s.routes()
	s.handler = s.logRequests(s.recoverPanics(s.refuseCrossOrigin(http.HandlerFunc(s.route))))
	return s, nil
}

// ServeHTTP serves one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// routes registers every route. A GET pattern serves HEAD too.
func (s *Server) routes() *http.ServeMux {
	m := http.NewServeMux()
	m.Handle("POST /hooks/alertmanager", s.countWebhook(s.requireAuth(s.requireJSON(http.HandlerFunc(s.webhook)))))
	if s.slack != nil { // Slack signs its requests: no bearer auth here
		m.Handle("POST /hooks/slack/interactions", s.slack) // notify/slack: verified, read, counted there
	}

	api := func(pattern string, h http.HandlerFunc) { m.Handle(pattern, s.requireAuth(h)) }
	api("GET /api/v1/runs", s.listRuns)
	api("GET /api/v1/runs/{id}", s.getRun)
	api("POST /api/v1/runs/{id}/cancel", s.cancelRun)
	if s.opts.Profiling != nil {
		s.profilingRoutes(api)
	}

	s.runPageRoutes(m) // GET/HEAD /runs, /runs/{id}, POST its forms: HTML; web.auth, its trusted proxy, or a page link

	if s.opts.Artifacts != nil { // a token or the API's auth, checked inside
		m.HandleFunc("GET /artifacts/{run}/{key...}", s.artifact)
	}

	m.HandleFunc("GET /-/healthy", s.healthy)
	m.HandleFunc("GET /-/ready", s.ready)
	m.Handle("POST /-/reload", s.requireAuth(http.HandlerFunc(s.reload)))
	m.Handle("PUT /-/reload", s.requireAuth(http.HandlerFunc(s.reload)))
	// ContinueOnError: a collector that cannot read its source (the run
	// store down, the spool's folder unreadable) must not take the whole
	// scrape down with it, autocapture_runs_store_up included; what it
	// could not gather is logged and counted in
	// promhttp_metric_handler_errors_total{cause="gathering"}.
	m.Handle("GET /metrics", promhttp.HandlerFor(s.opts.Registry, promhttp.HandlerOpts{Registry: s.opts.Registry,
		ErrorHandling: promhttp.ContinueOnError, ErrorLog: zapPrintln{s.log}}))
	return m
}

// zapPrintln is promhttp's error log on zap.
type zapPrintln struct{ l *zap.Logger }

func (z zapPrintln) Println(v ...any) {
	z.l.Warn("A metric could not be gathered; the scrape serves the rest.", zap.String("error", fmt.Sprint(v...)))
}

// statusBody is the answer of the operational endpoints.
type statusBody struct {
	Status string `json:"status"`
}

// errorBody is every error answer: a machine word and one line for people.
type errorBody struct {
	Status string   `json:"status"`
	Error  string   `json:"error"`
	Reason string   `json:"reason"`
	Errors []string `json:"errors,omitempty"`
}

// fail answers code with a JSON error body.
func fail(w http.ResponseWriter, code int, word, reason string) {
	writeJSON(w, code, errorBody{Status: "error", Error: word, Reason: clip.Line(reason, maxReason)})
}

func (s *Server) healthy(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, statusBody{"healthy"})
}

// ready answers 200 when the run store answers within 2 s.
func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.opts.Runs.Ping(ctx); err != nil {
		fail(w, http.StatusServiceUnavailable, "not_ready", "run store does not answer: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, statusBody{"ready"})
}

// reload reloads the playbooks; on failure the body carries every file:line error.
func (s *Server) reload(w http.ResponseWriter, _ *http.Request) {
	if s.opts.Reload == nil {
		fail(w, http.StatusNotImplemented, "no_reloader", "reloading is not available in this daemon")
		return
	}
	if err := s.opts.Reload(); err != nil { // the reloader has logged it
		lines := strings.Split(strings.TrimSpace(err.Error()), "\n")
		reason := lines[0]
		if len(lines) > 1 {
			reason = fmt.Sprintf("%s (and %d more)", lines[0], len(lines)-1)
		}
		writeJSON(w, http.StatusInternalServerError,
			errorBody{Status: "error", Error: "reload_failed", Reason: clip.Line(reason, maxReason), Errors: lines})
		return
	}
	s.log.Info("Playbooks reloaded.")
	writeJSON(w, http.StatusOK, statusBody{"reloaded"})
}
