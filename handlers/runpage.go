package handlers

import (
	"bytes"
	"embed"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/internal/bytesize"
	"github.com/autocapture/autocapture/internal/clip"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// The run pages: GET /runs (a list, paged and filtered like GET /api/v1/runs)
// and GET /runs/{id} (one run: its verdict and history, charts, slowest
// traces, profile, artifacts and step timings), server-rendered with
// html/template from the templates embedded here. Who may read them is
// pageAuth's (pageauth.go): web.auth, its trusted proxy, or for one run's
// page a link signed for it.
// Every label, annotation and finding is untrusted: html/template escapes it
// for where it lands (text, attribute, URL), and the page's
// Content-Security-Policy allows no script at all.

//go:embed templates/*.html
var pageFS embed.FS

var pageTemplates = template.Must(template.New("").Funcs(template.FuncMap{
	"pct":      pct,
	"bytes":    bytesize.Format,
	"dur":      humanDuration,
	"ms":       func(ms int64) string { return humanDuration(time.Duration(ms) * time.Millisecond) },
	"secs":     func(s float64) string { return strconv.FormatFloat(s, 'f', 2, 64) + " s" },
	"when":     func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
	"whenp":    whenPtr,
	"runpath":  runPath,
	"statecss": stateClass,
	"head":     func(title, home string) pageHead { return pageHead{title, home} },
}).ParseFS(pageFS, "templates/*.html"))

// pageLinkTTL is how long the signed artifact links of a rendered page work:
// the page is rendered per request, so they need only outlive the reading.
const pageLinkTTL = 12 * time.Hour

// pageCSP lets the page load its own images and inline style, nothing else:
// no script, no frames, no foreign origin.
const pageCSP = "default-src 'none'; img-src 'self'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// LinkSigner makes a link token for one run and key (*links.Signer). When
// the artifact route's verifier is one, the run page links artifacts with
// tokens, so a browser loads charts and downloads without sending the API's
// credentials (which a bearer token cannot be, from an <img>).
type LinkSigner interface {
	Sign(runID, key string, exp time.Time) url.Values
}

func (s *Server) runPageRoutes(e *gin.Engine) {
	e.GET("/runs", s.pageAuth, s.runsPage)
	e.HEAD("/runs", s.pageAuth, s.runsPage)
	e.GET("/runs/:id", s.pageAuth, s.runPage)
	e.HEAD("/runs/:id", s.pageAuth, s.runPage)
}

// runsPage serves GET /runs?alertname=&status=&limit=&cursor=.
func (s *Server) runsPage(c *gin.Context) {
	q, msg := s.pageListQuery(c)
	if msg != "" {
		s.pageError(c, http.StatusBadRequest, msg)
		return
	}
	page, err := s.opts.Runs.List(c.Request.Context(), q)
	if err != nil {
		s.pageRunError(c, "", err)
		return
	}
	v := listView{Query: q, Statuses: vocab.RunStatuses, Page: page}
	if page.Next != "" {
		nq := url.Values{"cursor": {page.Next}}
		if q.Alertname != "" {
			nq.Set("alertname", q.Alertname)
		}
		if q.Status != "" {
			nq.Set("status", string(q.Status))
		}
		if q.Limit != DefaultListLimit {
			nq.Set("limit", strconv.Itoa(q.Limit))
		}
		v.NextURL = "runs?" + nq.Encode()
	}
	for _, r := range page.Runs {
		v.Rows = append(v.Rows, newListRow(r))
	}
	s.renderPage(c, http.StatusOK, "runs.html", v)
}

// runPage serves GET /runs/{id}.
func (s *Server) runPage(c *gin.Context) {
	id := c.Param("id")
	run, err := s.opts.Runs.Get(c.Request.Context(), id)
	if err != nil {
		s.pageRunError(c, id, err)
		return
	}
	v := s.newRunView(run)
	if p := s.opts.Profiling; p != nil {
		rp, err := p.RunProfile(c.Request.Context(), id)
		switch {
		case err == nil:
			v.Lease, v.ProfileEvents = rp.Lease, rp.Events
		case errors.Is(err, runs.ErrNotFound):
		default:
			v.ProfileError = "the profile's lease events cannot be read now: " + clip.Line(err.Error(), maxReason)
		}
	}
	s.renderPage(c, http.StatusOK, "run.html", runPageData{runView: v, Home: homeOf(c)})
}

// runPageData is run.html's data: the run's view, and the list's address
// for the page's header, "" for a reader who came with a page link (the
// list needs a sign-in the link does not give, so it is not shown).
type runPageData struct {
	runView
	Home string
}

// renderPage renders into a buffer first, so a template error answers 500
// instead of half a page.
func (s *Server) renderPage(c *gin.Context, code int, name string, data any) {
	var buf bytes.Buffer
	if err := pageTemplates.ExecuteTemplate(&buf, name, data); err != nil {
		s.log.Error("Run page rendering failed.", zap.String("path", c.Request.URL.Path), zap.Error(err))
		code, buf = http.StatusInternalServerError, bytes.Buffer{}
		_ = pageTemplates.ExecuteTemplate(&buf, "error.html", errorView{Code: code, Reason: "the page could not be rendered", Home: homeOf(c)})
	}
	h := c.Writer.Header()
	h.Set("Content-Security-Policy", pageCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer") // the artifact links carry tokens
	h.Set("Cache-Control", "no-store")
	c.Data(code, "text/html; charset=utf-8", buf.Bytes())
}

// pageHead is what the layout's head shows: the title, and the list's
// address relative to the page.
type pageHead struct{ Title, Home string }

type errorView struct {
	Code   int
	Reason string
	Home   string
}

func (s *Server) pageError(c *gin.Context, code int, reason string) {
	s.renderPage(c, code, "error.html", errorView{Code: code, Reason: clip.Line(reason, maxReason), Home: homeOf(c)})
	c.Abort()
}

// pageRunError is runError as a page: 404, 400, else 503.
func (s *Server) pageRunError(c *gin.Context, id string, err error) {
	switch {
	case errors.Is(err, runs.ErrNotFound):
		s.pageError(c, http.StatusNotFound, "no run "+strconv.Quote(clip.String(id, 80)))
	case errors.Is(err, runs.ErrBadCursor):
		s.pageError(c, http.StatusBadRequest, err.Error())
	default:
		s.log.Error("Run store request failed.", zap.String("path", c.Request.URL.Path), zap.Error(err))
		s.pageError(c, http.StatusServiceUnavailable, "the run store does not answer: "+err.Error())
	}
}

// signer is the artifact links' signer, nil when the route is off or its
// verifier cannot sign (links then go without a token, held to the API's auth).
func (s *Server) signer() LinkSigner {
	if a := s.opts.Artifacts; a != nil {
		if ls, ok := a.Links.(LinkSigner); ok {
			return ls
		}
	}
	return nil
}

// artifactHref is the page's link to key of run runID: relative (the page is
// /runs/{id}, so ../artifacts/… is the route wherever the daemon is mounted),
// with a token when the route can sign; "" when there is no route.
func (s *Server) artifactHref(runID, key string) string {
	if s.opts.Artifacts == nil || key == "" {
		return ""
	}
	segs := strings.Split(key, "/")
	for i, p := range segs {
		segs[i] = url.PathEscape(p)
	}
	u := "../artifacts/" + url.PathEscape(runID) + "/" + strings.Join(segs, "/")
	if sg := s.signer(); sg != nil {
		u += "?" + sg.Sign(runID, key, s.opts.Now().Add(pageLinkTTL)).Encode()
	}
	return u
}

func pct(v float64) string { return strconv.FormatFloat(100*v, 'f', 1, 64) + "%" }

func humanDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0 s"
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + " ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s"
	}
	return d.Round(time.Second).String()
}

func whenPtr(t *time.Time) string {
	if t == nil {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

// homeOf is the list's address relative to the page answering c; "" (no
// link) for a reader let in by a page link, or refused, whom the list would
// refuse.
func homeOf(c *gin.Context) string {
	if readerOf(c) != readerSignedIn {
		return ""
	}
	if c.Param("id") != "" {
		return "../runs"
	}
	return "runs"
}

// runPath is a run's page relative to /runs (the list links rows with it).
func runPath(id string) string { return "runs/" + url.PathEscape(id) }

// pageListQuery reads GET /runs's query as GET /api/v1/runs reads its own;
// a non-empty string says what is wrong.
func (s *Server) pageListQuery(c *gin.Context) (runs.ListQuery, string) {
	q := runs.ListQuery{Alertname: c.Query("alertname"), Limit: DefaultListLimit, Cursor: c.Query("cursor")}
	if st := c.Query("status"); st != "" {
		var err error
		if q.Status, err = vocab.ParseRunStatus(st); err != nil {
			return q, err.Error()
		}
	}
	if l := c.Query("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > MaxListLimit {
			return q, "limit must be an integer from 1 to " + strconv.Itoa(MaxListLimit)
		}
		q.Limit = n
	}
	return q, ""
}

// stateClass is the CSS class of a status: one of a fixed set, whatever the
// status says.
func stateClass(status vocab.Status) string {
	switch status {
	case vocab.StatusSucceeded, "healthy":
		return "ok"
	case vocab.StatusFailed, vocab.StatusCancelled, "timed_out":
		return "bad"
	case vocab.StatusPartial, vocab.StatusSkipped:
		return "warn"
	case vocab.StatusQueued, vocab.StatusRunning:
		return "live"
	}
	return "other"
}
