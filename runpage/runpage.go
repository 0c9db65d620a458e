package runpage

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/internal/bytesize"
	"github.com/autocapture/autocapture/internal/clip"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

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
// no script, no frames, no foreign origin; forms post only to the daemon.
const pageCSP = "default-src 'none'; img-src 'self'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// maxReason bounds a reason shown on an error page.
const maxReason = 200

// Runs is what the pages read of the run service (*runner.Service).
type Runs interface {
	// List returns runs newest first; errors wrap runs.ErrBadCursor for a
	// cursor no page handed out.
	List(ctx context.Context, q runs.ListQuery) (runs.Page, error)
	// Get returns one run; errors wrap runs.ErrNotFound.
	Get(ctx context.Context, id string) (*runs.Run, error)
}

// Profiles gives a run's profiler lease and its events (*profiling.Plane).
type Profiles interface {
	RunProfile(ctx context.Context, runID string) (runs.RunProfile, error)
}

// LinkSigner makes a link token for one run and artifact key
// (*links.Signer), so a browser loads charts and downloads without the
// API's credentials (which an <img> cannot send).
type LinkSigner interface {
	Sign(runID, key string, exp time.Time) url.Values
}

// Options configures New.
type Options struct {
	Runs Runs
	// Profiles, when set, adds the profiler lease's events to a run's page.
	Profiles Profiles
	// Artifacts says the artifact route (/artifacts/{run}/{key}) is served:
	// the page links what the steps stored. Signer, when set, signs those
	// links; without it they go bare, held to the API's auth.
	Artifacts bool
	Signer    LinkSigner
	// Silencer, when set, offers the Silence form to signed-in readers.
	Silencer Silencer
	// Registerer receives the form's metric; nil: not registered.
	Registerer prometheus.Registerer
	// Now is the clock of links and the timeline; nil means time.Now.
	Now func() time.Time
	Log *zap.Logger
}

// Pages renders the run pages; package handlers decides who reads them.
type Pages struct {
	o       Options
	actions *prometheus.CounterVec
}

// New builds the pages.
func New(o Options) (*Pages, error) {
	if o.Runs == nil || o.Log == nil {
		return nil, errors.New("runpage: Runs and Log are required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	p := &Pages{o: o, actions: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "autocapture_page_actions_total",
		Help: "Actions taken from a run page's form (silence, unsilence), by result: done, failed, already, busy, refused, unknown, error.",
	}, []string{"action", "result"})}
	if o.Registerer != nil {
		if err := o.Registerer.Register(p.actions); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Reader is who reads a page, as package handlers let them in.
type Reader struct {
	// SignedIn: web.auth, its trusted proxy, or no auth configured. false:
	// a page link's reader, who sees one run's page and may act on nothing.
	SignedIn bool
	// User names a signed-in reader in what they do (a silence's createdBy).
	User runs.User
}

// List serves GET /runs: q, already read and checked, one page of it.
func (p *Pages) List(w http.ResponseWriter, r *http.Request, rd Reader, q runs.ListQuery) {
	page, err := p.o.Runs.List(r.Context(), q)
	if err != nil {
		p.runError(w, r, homeOf(rd, 0), "", err)
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
		if r.URL.Query().Has("limit") {
			nq.Set("limit", strconv.Itoa(q.Limit))
		}
		v.NextURL = "runs?" + nq.Encode()
	}
	for _, run := range page.Runs {
		v.Rows = append(v.Rows, newListRow(run))
	}
	p.render(w, r, http.StatusOK, "runs.html", v)
}

// Run serves GET /runs/{id}.
func (p *Pages) Run(w http.ResponseWriter, r *http.Request, rd Reader, id string) {
	run, err := p.o.Runs.Get(r.Context(), id)
	if err != nil {
		p.runError(w, r, homeOf(rd, 1), id, err)
		return
	}
	v := p.newRunView(run)
	if pr := p.o.Profiles; pr != nil {
		rp, err := pr.RunProfile(r.Context(), id)
		switch {
		case err == nil:
			v.Lease, v.ProfileEvents = rp.Lease, rp.Events
		case errors.Is(err, runs.ErrNotFound):
		default:
			v.ProfileError = "the profile's lease events cannot be read now: " + clip.Line(err.Error(), maxReason)
		}
	}
	if rd.SignedIn && p.o.Silencer != nil {
		v.Silence = newSilenceView(run, r.URL.Query().Get("result"))
	}
	p.render(w, r, http.StatusOK, "run.html", runPageData{runView: v, Home: homeOf(rd, 1)})
}

// runPageData is run.html's data: the run's view, and the list's address
// for the page's header, "" for a reader who came with a page link (the
// list needs a sign-in the link does not give, so it is not shown).
type runPageData struct {
	runView
	Home string
}

// Refusal is a page that lets a reader in nowhere: what happened, and how
// to read the page instead.
type Refusal struct {
	Title     string
	Lines     []string
	WaysTitle string
	Ways      []Way
	Home      string // always "": these answers link no page that would refuse the reader
}

// Way is one way to read a page: a sentence, and when following it is a
// click, the link's address and text.
type Way struct{ Text, Href, Label string }

// Refused answers code with v.
func (p *Pages) Refused(w http.ResponseWriter, r *http.Request, code int, v Refusal) {
	v.Home = ""
	p.render(w, r, code, "refused.html", v)
}

// render renders into a buffer first, so a template error answers 500
// instead of half a page.
func (p *Pages) render(w http.ResponseWriter, r *http.Request, code int, name string, data any) {
	var buf bytes.Buffer
	if err := pageTemplates.ExecuteTemplate(&buf, name, data); err != nil {
		p.o.Log.Error("Run page rendering failed.", zap.String("path", r.URL.Path), zap.Error(err))
		code, buf = http.StatusInternalServerError, bytes.Buffer{}
		_ = pageTemplates.ExecuteTemplate(&buf, "error.html", errorView{Code: code, Reason: "the page could not be rendered"})
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", pageCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer") // the artifact links carry tokens
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	if r.Method != http.MethodHead {
		_, _ = w.Write(buf.Bytes())
	}
}

// pageHead is what the layout's head shows: the title, and the list's
// address relative to the page.
type pageHead struct{ Title, Home string }

type errorView struct {
	Code   int
	Reason string
	Home   string
}

// Error answers code with a page saying reason; depth is how many segments
// below /runs/ the page is (0 for /runs, 1 for /runs/{id}), for its link
// to the list.
func (p *Pages) Error(w http.ResponseWriter, r *http.Request, rd Reader, depth, code int, reason string) {
	p.errorPage(w, r, homeOf(rd, depth), code, reason)
}

func (p *Pages) errorPage(w http.ResponseWriter, r *http.Request, home string, code int, reason string) {
	p.render(w, r, code, "error.html", errorView{Code: code, Reason: clip.Line(reason, maxReason), Home: home})
}

// runError is a run store's error as a page: 404, 400, else 503.
func (p *Pages) runError(w http.ResponseWriter, r *http.Request, home, id string, err error) {
	switch {
	case errors.Is(err, runs.ErrNotFound):
		p.errorPage(w, r, home, http.StatusNotFound, "no run "+strconv.Quote(clip.String(id, 80)))
	case errors.Is(err, runs.ErrBadCursor):
		p.errorPage(w, r, home, http.StatusBadRequest, err.Error())
	default:
		p.o.Log.Error("Run store request failed.", zap.String("path", r.URL.Path), zap.Error(err))
		p.errorPage(w, r, home, http.StatusServiceUnavailable, "the run store does not answer: "+err.Error())
	}
}

// artifactHref is the page's link to key of run runID: relative (the page is
// /runs/{id}, so ../artifacts/… is the route wherever the daemon is mounted),
// with a token when the route can sign; "" when there is no route.
func (p *Pages) artifactHref(runID, key string) string {
	if !p.o.Artifacts || key == "" {
		return ""
	}
	segs := strings.Split(key, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	u := "../artifacts/" + url.PathEscape(runID) + "/" + strings.Join(segs, "/")
	if sg := p.o.Signer; sg != nil {
		u += "?" + sg.Sign(runID, key, p.o.Now().Add(pageLinkTTL)).Encode()
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

// homeOf is the list's address relative to a page depth segments below
// /runs/; "" (no link) for a reader the list would refuse.
func homeOf(rd Reader, depth int) string {
	if !rd.SignedIn {
		return ""
	}
	return strings.Repeat("../", depth) + "runs"
}

// runPath is a run's page relative to /runs (the list links rows with it).
func runPath(id string) string { return "runs/" + url.PathEscape(id) }

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
