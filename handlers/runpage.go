package handlers

import (
	"net/http"
	"net/url"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/links"
	"github.com/autocapture/autocapture/runpage"
)

// The run pages' routes: package runpage renders them; here is who may
// read them (pageauth.go) and who may act from them (actAuth).

func (s *Server) runPageRoutes(m *http.ServeMux) {
	m.Handle("GET /runs", s.pageAuth(s.runsPage))
	m.Handle("GET /runs/{id}", s.pageAuth(s.runPage))
	// The router's refuseCrossOrigin holds these to the page's own origin.
	m.Handle("POST /runs/{id}/silence", s.actAuth("silence", func(w http.ResponseWriter, r *http.Request, rd runpage.Reader) {
		s.pages.Silence(w, r, rd, r.PathValue("id"))
	}))
	m.Handle("POST /runs/{id}/unsilence", s.actAuth("unsilence", func(w http.ResponseWriter, r *http.Request, rd runpage.Reader) {
		s.pages.Unsilence(w, r, rd, r.PathValue("id"))
	}))
}

// runsPage serves GET /runs?alertname=&status=&limit=&cursor=.
func (s *Server) runsPage(w http.ResponseWriter, r *http.Request, rd runpage.Reader) {
	q, msg := s.listQuery(r)
	if msg != "" {
		s.pages.Error(w, r, rd, 0, http.StatusBadRequest, msg)
		return
	}
	s.pages.List(w, r, rd, q)
}

// runPage serves GET /runs/{id}.
func (s *Server) runPage(w http.ResponseWriter, r *http.Request, rd runpage.Reader) {
	s.pages.Run(w, r, rd, r.PathValue("id"))
}

// actAuth lets a signed-in reader take action from a run's page. A page
// link opens the page for reading only: a request carrying its token and
// no sign-in is refused (403) saying so; one with neither is asked to sign
// in (401).
func (s *Server) actAuth(action string, h pageHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rd, ok, why := s.signIn(r)
		if ok {
			h(w, r, rd)
			return
		}
		if !s.carriesLinkToken(w, r) {
			s.askSignIn(w, r, why)
			return
		}
		id := r.PathValue("id")
		s.log.Info("Run page action refused: a page link reads, it does not act.", zap.String("run", id),
			zap.String("remote", clientIP(r)), zap.String("why", why))
		s.pages.Refuse(w, r, action, runpage.Refusal{Title: "A page link cannot " + action,
			Lines: []string{"The link from the Slack thread lets you read this run's page, nothing more: acting on the alert needs a sign-in, so that Alertmanager and the thread can say who did it.",
				"Nothing was done."},
			WaysTitle: "To " + action + " it", Ways: s.readWays(id, false)})
	})
}

// carriesLinkToken says whether r carries a page link's token, in its
// query or its form.
func (s *Server) carriesLinkToken(w http.ResponseWriter, r *http.Request) bool {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil || q.Has(links.ParamSignature) || q.Has(links.ParamExpires) {
		return true
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		return false
	}
	return r.PostForm.Has(links.ParamSignature) || r.PostForm.Has(links.ParamExpires)
}

// maxFormBytes caps a page form's body.
const maxFormBytes = 16 << 10

// newPages builds the run pages over the run service; the Silence form is
// on when the thread's actions are (alertmanager.urls and the silence
// action enabled).
func (s *Server) newPages(reg prometheus.Registerer) (*runpage.Pages, error) {
	o := runpage.Options{Runs: s.opts.Runs, Registerer: reg, Now: s.opts.Now, Log: s.log}
	if s.opts.Profiling != nil {
		o.Profiles = s.opts.Profiling
	}
	if a := s.opts.Artifacts; a != nil {
		o.Artifacts = true
		if ls, ok := a.Links.(runpage.LinkSigner); ok {
			o.Signer = ls
		}
	}
	if a := s.opts.SlackActions; a != nil && a.Actions != nil && silencing(a.Actions) {
		o.Silencer = a.Actions
	}
	return runpage.New(o)
}

// silencing says whether the thread's actions silence (an Alertmanager is
// configured), not only take profiles again.
func silencing(a Actions) bool {
	s, ok := a.(interface{ Silences() bool })
	return !ok || s.Silences()
}
