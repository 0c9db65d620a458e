package handlers

import (
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/internal/clip"
	"github.com/autocapture/autocapture/links"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/runpage"
)

// Who may read the run pages (GET/HEAD /runs and /runs/{id}), in order:
//
//  1. a signed-in reader: web.auth's token, password or client certificate
//     (or anyone, when web.auth is not configured at all), or the trusted
//     proxy's header from one of its addresses. Such a reader sees every page,
//     with its link to the list, and the Silence form (actAuth); a page-link
//     token it also carries is ignored (an expired link still opens the page
//     for someone signed in).
//  2. a reader with a page link: exp and sig made by SignPage for exactly this
//     run open GET/HEAD /runs/{that id} and nothing else — not another run,
//     not the list, not the API, no form: a POST with the token is refused
//     (403) saying the link reads only. The page they get hides the list's
//     link and the Silence form (they would refuse them). A token that is expired, altered, made for
//     another run or for an artifact is refused with a 403 page saying which
//     and how to read the run instead; refusals are logged and counted in
//     autocapture_link_refusals_total{route="page",reason}.
//  3. anyone else: a 401 page saying how to sign in.
//
// The answers are HTML (a browser opened the link), never JSON. The page's
// Referrer-Policy (no-referrer) and Cache-Control (no-store) keep the token
// out of other sites' logs and out of caches.

// PageLinkVerifier checks a run-page link token for exactly one run (*links.Signer).
type PageLinkVerifier interface {
	VerifyPage(runID string, q url.Values, now time.Time) error
}

var _ PageLinkVerifier = (*links.Signer)(nil)

// pagesGuarded says whether the pages need a reader: web.auth holds a method,
// or a trusted proxy is configured (then the pages need its header even
// where web.allow_unauthenticated leaves the API open).
func (s *Server) pagesGuarded() bool { return s.auth.enabled || s.proxy != nil }

// signedIn says whether r is a signed-in reader (1. above), else why not,
// for the log: never what was sent.
func (s *Server) signedIn(r *http.Request) (bool, string) {
	_, ok, why := s.webUser(r)
	return ok, why
}

// webUser is the signed-in reader of r as the actions they take name them:
// the proxy's user, the basic-auth user, the certificate's CN, the API
// token, or with no auth configured, the peer's address. The id says how
// they signed in ("web:basic"), so no web user reads as a Slack user or as
// autocapture itself.
func (s *Server) webUser(r *http.Request) (runs.User, bool, string) {
	if !s.pagesGuarded() {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		return runs.User{ID: "web:open", Name: "unauthenticated reader at " + host}, true, ""
	}
	var why []string
	if s.proxy != nil {
		user, w := s.proxy.user(r)
		if user != "" {
			return runs.User{ID: "web:proxy", Name: user}, true, ""
		}
		why = append(why, w)
	}
	if s.auth.enabled {
		ok, w := s.auth.check(r)
		if ok {
			return s.auth.who(r), true, ""
		}
		why = append(why, w)
	}
	return runs.User{}, false, strings.Join(strings.Fields(strings.Join(why, "; ")), " ")
}

// who names who r's credential belongs to, once check accepted it, in
// check's order: a verified certificate first, whatever header came with it.
func (a *authenticator) who(r *http.Request) runs.User {
	if a.certs && verifiedClient(r) {
		if cn := clientCN(r); cn != "" {
			return runs.User{ID: "web:cert", Name: cn}
		}
		return runs.User{ID: "web:cert", Name: "a client certificate without a CN"}
	}
	if u, _, ok := r.BasicAuth(); ok {
		return runs.User{ID: "web:basic", Name: u}
	}
	return runs.User{ID: "web:token", Name: "the API token's holder"}
}

// signIn is r's signed-in reader, else why not.
func (s *Server) signIn(r *http.Request) (runpage.Reader, bool, string) {
	u, ok, why := s.webUser(r)
	return runpage.Reader{SignedIn: ok, User: u}, ok, why
}

// pageHandler serves a page to the reader let in.
type pageHandler func(w http.ResponseWriter, r *http.Request, rd runpage.Reader)

// pageAuth lets a reader through to a page, or answers for it (401 or 403, HTML).
func (s *Server) pageAuth(h pageHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rd, ok := s.admitPage(w, r); ok {
			h(w, r, rd)
		}
	})
}

// admitPage is the reader r comes as, or false once it answered the refusal.
func (s *Server) admitPage(w http.ResponseWriter, r *http.Request) (runpage.Reader, bool) {
	rd, ok, why := s.signIn(r)
	if ok {
		return rd, true
	}
	// A query that does not parse is taken as a (malformed) token, as on the
	// artifact route.
	q, qerr := url.ParseQuery(r.URL.RawQuery)
	id := r.PathValue("id")
	if id != "" && s.opts.PageLinks != nil && (q.Has(links.ParamSignature) || q.Has(links.ParamExpires) || qerr != nil) {
		err := s.opts.PageLinks.VerifyPage(id, q, s.opts.Now())
		if err == nil {
			return runpage.Reader{}, true // a page link: this run's page, read only
		}
		s.refusePageLink(w, r, id, q, err)
		return runpage.Reader{}, false
	}
	s.askSignIn(w, r, why)
	return runpage.Reader{}, false
}

// askSignIn answers 401 with a page saying how to sign in.
func (s *Server) askSignIn(w http.ResponseWriter, r *http.Request, why string) {
	id := r.PathValue("id")
	s.log.Warn("Request refused: not authenticated.", zap.String("path", r.URL.Path),
		zap.String("remote", clientIP(r)), zap.String("why", why))
	w.Header().Set("WWW-Authenticate", s.pageChallenge())
	v := runpage.Refusal{Title: "Sign-in needed", WaysTitle: "To read it",
		Lines: []string{"Run pages show alert labels and findings, so this daemon serves them only to readers it can authenticate, or who hold a link made for one run."}}
	if id == "" {
		v.Lines = append(v.Lines, "A link from a Slack thread opens only its own run's page; the list of runs needs a sign-in.")
	}
	v.Ways = s.readWays(id, id != "")
	s.pages.Refused(w, r, http.StatusUnauthorized, v)
}

// pageChallenge is the 401's WWW-Authenticate: Basic when a password is
// configured (a browser can answer it), else Bearer.
func (s *Server) pageChallenge() string {
	if s.auth.user != nil {
		return `Basic realm="autocapture"`
	}
	return `Bearer realm="autocapture"`
}

// refusePageLink answers a page-link token that does not open this page:
// 403 with a page saying why and how to read the run instead.
func (s *Server) refusePageLink(w http.ResponseWriter, r *http.Request, id string, q url.Values, err error) {
	reason := linkReason(err)
	s.metrics.linkRefusals.WithLabelValues("page", reason).Inc()
	s.log.Info("Run page link refused.", zap.String("run", id), zap.String("remote", clientIP(r)), zap.String("why", err.Error()))
	v := runpage.Refusal{WaysTitle: "To read this run"}
	switch reason {
	case reasonExpired:
		v.Title = "This link has expired"
		until := "its expiry"
		if exp, ok := links.Expires(q); ok { // authentic: the signature matched
			until = exp.UTC().Format("2006-01-02 15:04 UTC")
		}
		v.Lines = []string{"This link to run " + clip.String(id, 80) + " worked until " + until + ".",
			"Links in Slack messages work for a limited time (web.link_ttl, 30 days by default)."}
		v.Ways = append([]runpage.Way{{Text: "Open the run from a newer message about it: each update of the Slack thread's first message carries a fresh link."}},
			s.readWays(id, false)...)
	case reasonBadSignature:
		v.Title = "This link does not open this run"
		v.Lines = []string{"Its signature does not match this run's page: the link was altered, made for another run or for a file, or made before this daemon's link key changed."}
		v.Ways = append([]runpage.Way{{Text: "Open the run again from its Slack thread, copying the whole link."}}, s.readWays(id, false)...)
	default:
		v.Title = "This link does not open this run"
		v.Lines = []string{"Its token is malformed: the link may have been cut short when it was copied."}
		v.Ways = append([]runpage.Way{{Text: "Open the run again from its Slack thread, copying the whole link."}}, s.readWays(id, false)...)
	}
	s.pages.Refused(w, r, http.StatusForbidden, v)
}

// readWays lists how a reader can sign in for run id's page ("" for the
// list), from what this daemon accepts; slack says the Slack thread's link
// is one way (for a reader who came without one).
func (s *Server) readWays(id string, slack bool) []runpage.Way {
	var out []runpage.Way
	if slack && s.opts.PageLinks != nil {
		out = append(out, runpage.Way{Text: `Open the run from its Slack thread: the "Run page" button carries a link made for this page.`})
	}
	page, label := "../runs", "the list of runs" // relative to /runs/{id} and to /runs alike
	if id != "" {
		page, label = url.PathEscape(id), "this run's page"
	}
	if s.proxy != nil {
		out = append(out, runpage.Way{Text: "Sign in through the single sign-on proxy in front of this daemon and open the page through it."})
	}
	if s.auth.user != nil {
		out = append(out, runpage.Way{Text: "Sign in with this daemon's user name and password: your browser asks for them when you open", Href: page, Label: label})
	}
	if s.auth.certs {
		out = append(out, runpage.Way{Text: "Open the page with a client certificate this daemon trusts."})
	}
	if s.auth.token != nil {
		api := "GET /api/v1/runs"
		if id != "" {
			api += "/" + url.PathEscape(id)
		}
		out = append(out, runpage.Way{Text: "With the API's bearer token (a browser cannot send it): " + api + " with the header Authorization: Bearer <token>."})
	}
	return out
}

// trustedProxy is web.auth.trusted_proxy, parsed: the header that names the
// signed-in user, honoured only from the proxy's addresses.
type trustedProxy struct {
	header string
	from   []netip.Prefix
}

// newTrustedProxy is nil without a config. Addresses that do not parse
// (config.Load refuses them; a config built in code may hold them) trust
// nobody: the header then never authenticates, and the pages stay guarded.
func newTrustedProxy(p *config.TrustedProxy) *trustedProxy {
	if p == nil {
		return nil
	}
	from, err := p.Prefixes()
	if err != nil {
		from = nil
	}
	return &trustedProxy{header: http.CanonicalHeaderKey(strings.TrimSpace(p.Header)), from: from}
}

// user is the signed-in user the proxy names in r, or "" and why not (""
// when r carries no such header). The peer is the TCP connection's, never
// a forwarded-for header's.
func (p *trustedProxy) user(r *http.Request) (string, string) {
	if p.header == "" {
		return "", "the trusted proxy has no header configured"
	}
	vals := r.Header.Values(p.header)
	if len(vals) == 0 {
		return "", "no " + p.header + " header"
	}
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil || !p.trusts(peer.Addr().Unmap()) {
		return "", p.header + " from " + r.RemoteAddr + ", not an address in web.auth.trusted_proxy.from: ignored"
	}
	if len(vals) > 1 {
		return "", "more than one " + p.header + " header: ignored"
	}
	u := strings.TrimSpace(vals[0])
	if u == "" {
		return "", "an empty " + p.header + " header from the trusted proxy"
	}
	return u, ""
}

func (p *trustedProxy) trusts(a netip.Addr) bool {
	for _, pf := range p.from {
		if pf.Contains(a) {
			return true
		}
	}
	return false
}
