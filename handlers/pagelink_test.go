package handlers

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/internal/testkit/htmldoc"
	"github.com/autocapture/autocapture/links"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

const (
	linkRun   = "0198-link-run"
	linkOther = "0198-link-other"
	linkChart = "2026/05/01/LinkAlert/0198-link-run/vllm/kv_chart/chart.png"
	apiToken  = "api-token-0123"
)

// linkNow is the page-link tests' clock.
var linkNow = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

// pageLinkHarness serves the pages with page links on (PageLinks), the
// artifact route on a local store holding one chart, and auth a.
func pageLinkHarness(t *testing.T, a config.Auth) (*harness, *links.Signer) {
	t.Helper()
	signer, err := links.NewSigner([]byte("page-link-test-key-0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	store := newLocal(t)
	png := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{7}, 64)...)
	if _, err := store.Put(context.Background(), linkChart, bytes.NewReader(png), vocab.ObjectMeta{ContentType: "image/png"}); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, func(o *Options) {
		o.Auth, o.PageLinks, o.Now = a, signer, func() time.Time { return linkNow }
		o.Artifacts = &ArtifactOptions{Runs: runArtifacts{linkRun: {linkChart}, linkOther: {}}, Store: store, Links: signer}
	})
	at := linkNow.Add(-time.Hour)
	h.runs.runs = append(h.runs.runs,
		&runs.Run{ID: linkOther, Alertname: "OtherAlert", Status: vocab.StatusFailed, CreatedAt: at, StartsAt: at},
		&runs.Run{ID: linkRun, Alertname: "LinkAlert", Status: vocab.StatusSucceeded, CreatedAt: at, StartsAt: at,
			Labels:  map[string]string{"alertname": "LinkAlert"},
			Verdict: &vocab.Verdict{ID: vocab.VerdictKVPressure, Evidence: []string{"KV cache 98% full"}},
			Steps: []executor.StepRecord{{Plan: "vllm", ID: "kv_chart", Kind: "chart", Status: "succeeded",
				Artifacts: []vocab.Artifact{{Name: "chart.png", Key: linkChart, ContentType: "image/png", Size: int64(len(png))}}}}})
	return h, signer
}

// get serves method path from the address remote with header.
func (h *harness) from(method, path, remote string, header http.Header) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, nil)
	req.RemoteAddr = remote
	for k, v := range header {
		req.Header[k] = v
	}
	return serve(h, req)
}

func isHTML(rec *httptest.ResponseRecorder) bool {
	return strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html")
}

// TestPageLinkOpensExactlyItsRunsPage: the matrix of what a page link opens
// with bearer auth on (the recommended wiring): its run's page (GET and
// HEAD), whose charts and artifact links then load without credentials and
// whose header hides the list a link reader cannot open; nothing else — not
// another run, the list, the API, a POST or an artifact. Expired, forged,
// malformed and artifact-scoped tokens are refused with an HTML page saying
// why, logged (without the token) and counted; a reader signed in with the
// token gets the page whatever link they came with.
func TestPageLinkOpensExactlyItsRunsPage(t *testing.T) {
	h, signer := pageLinkHarness(t, config.Auth{BearerToken: apiToken})
	tok := signer.SignPage(linkRun, linkNow.Add(30*24*time.Hour))
	page := "/runs/" + linkRun + "?" + tok.Encode()

	rec := h.from("GET", page, "192.0.2.10:5000", nil)
	body := rec.Body.String()
	if rec.Code != 200 || !isHTML(rec) || !strings.Contains(body, "LinkAlert") || !strings.Contains(body, linkRun) || !strings.Contains(body, "succeeded") {
		t.Fatalf("GET the run's page with its link: %d %s\n%s", rec.Code, rec.Header().Get("Content-Type"), body)
	}
	if strings.Contains(body, `href="../runs"`) {
		t.Errorf("a link reader is shown the list's link, which refuses them")
	}
	doc := htmldoc.Parse(t, rec.Body.Bytes())
	var srcs []string
	for _, n := range htmldoc.Elements(doc, "img") {
		srcs = append(srcs, htmldoc.Attr(n, "src"))
	}
	for _, n := range htmldoc.Elements(doc, "a") {
		if htmldoc.Attr(n, "class") == "artifact" {
			srcs = append(srcs, htmldoc.Attr(n, "href"))
		}
	}
	if len(srcs) < 2 {
		t.Fatalf("the page's chart and artifact links: %v, want the chart inline and linked", srcs)
	}
	for _, s := range srcs {
		u := htmldoc.Resolve(t, "http://ac.example"+page, s)
		if r := h.from("GET", strings.TrimPrefix(u, "http://ac.example"), "192.0.2.10:5000", nil); r.Code != 200 || r.Header().Get("Content-Type") != "image/png" {
			t.Errorf("the page's link %s without credentials: %d %s", s, r.Code, r.Body.String())
		}
	}
	if rec := h.from("HEAD", page, "192.0.2.10:5000", nil); rec.Code != 200 {
		t.Errorf("HEAD the run's page with its link: %d", rec.Code)
	}

	expired := signer.SignPage(linkRun, linkNow.Add(-time.Hour))
	flipped := url.Values{links.ParamExpires: tok[links.ParamExpires], links.ParamSignature: {"A" + tok.Get(links.ParamSignature)[1:]}}
	if flipped.Get(links.ParamSignature) == tok.Get(links.ParamSignature) {
		flipped.Set(links.ParamSignature, "B"+tok.Get(links.ParamSignature)[1:])
	}
	artifactTok := signer.Sign(linkRun, "page", linkNow.Add(time.Hour))
	chartTok := signer.Sign(linkRun, linkChart, linkNow.Add(time.Hour))
	cases := []struct {
		name, method, path string
		code               int
		html               bool   // the answer is a page, not JSON
		says               string // in the answer
	}{
		{"another run", "GET", "/runs/" + linkOther + "?" + tok.Encode(), 403, true, "This link does not open this run"},
		{"the list", "GET", "/runs?" + tok.Encode(), 401, true, "Sign-in needed"},
		{"the API's run", "GET", "/api/v1/runs/" + linkRun + "?" + tok.Encode(), 401, false, "unauthorized"},
		{"the API's list", "GET", "/api/v1/runs?" + tok.Encode(), 401, false, "unauthorized"},
		{"cancel", "POST", "/api/v1/runs/" + linkRun + "/cancel?" + tok.Encode(), 401, false, "unauthorized"},
		{"POST the page", "POST", page, 405, false, "not allowed"},
		{"an artifact", "GET", "/artifacts/" + linkRun + "/" + linkChart + "?" + tok.Encode(), 403, false, "does not match"},
		{"expired", "GET", "/runs/" + linkRun + "?" + expired.Encode(), 403, true, "This link has expired"},
		{"forged", "GET", "/runs/" + linkRun + "?" + flipped.Encode(), 403, true, "Its signature does not match this run&#39;s page"},
		{"an artifact token for the key page", "GET", "/runs/" + linkRun + "?" + artifactTok.Encode(), 403, true, "does not open this run"},
		{"an artifact's own token", "GET", "/runs/" + linkRun + "?" + chartTok.Encode(), 403, true, "does not open this run"},
		{"exp without sig", "GET", "/runs/" + linkRun + "?exp=" + tok.Get("exp"), 403, true, "malformed"},
		{"no token", "GET", "/runs/" + linkRun, 401, true, "Sign-in needed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := h.from(c.method, c.path, "192.0.2.10:5000", nil)
			if rec.Code != c.code || isHTML(rec) != c.html || !strings.Contains(rec.Body.String(), c.says) {
				t.Fatalf("%s %s: %d %s, want %d (html %v) saying %q\n%s", c.method, c.path, rec.Code,
					rec.Header().Get("Content-Type"), c.code, c.html, c.says, rec.Body.String())
			}
			if c.html && strings.Contains(rec.Body.String(), `href="../runs"`) {
				t.Errorf("the refusal links the list, which refuses this reader too")
			}
		})
	}
	if r, _ := h.runs.find(linkRun); r.Status != vocab.StatusSucceeded {
		t.Fatalf("the run changed: %s", r.Status)
	}
	for reason, want := range map[string]float64{"expired": 1, "bad_signature": 4, "malformed": 1} {
		if got := testutil.ToFloat64(h.srv.metrics.linkRefusals.WithLabelValues("page", reason)); got != want {
			t.Errorf("autocapture_link_refusals_total{route=page,reason=%s} = %v, want %v", reason, got, want)
		}
	}
	if got := testutil.ToFloat64(h.srv.metrics.linkRefusals.WithLabelValues("artifact", "bad_signature")); got != 1 {
		t.Errorf("artifact refusals %v, want the page token on the artifact", got)
	}
	refused := h.logs.FilterMessage("Run page link refused.").All()
	if len(refused) != 6 {
		t.Errorf("%d refusals logged, want 6", len(refused))
	}
	for _, e := range h.logs.All() {
		for _, f := range e.Context {
			if strings.Contains(f.String, tok.Get(links.ParamSignature)) || strings.Contains(f.String, expired.Get(links.ParamSignature)) {
				t.Fatalf("a log line carries a link's signature: %s %v", e.Message, e.Context)
			}
		}
	}

	// Signed in, any link (expired included) is beside the point.
	bearer := http.Header{"Authorization": {"Bearer " + apiToken}}
	for _, p := range []string{"/runs/" + linkRun + "?" + expired.Encode(), "/runs/" + linkRun, "/runs"} {
		rec := h.from("GET", p, "192.0.2.10:5000", bearer)
		if rec.Code != 200 || !strings.Contains(rec.Body.String(), `href="`) {
			t.Errorf("GET %s with the bearer token: %d", p, rec.Code)
		}
	}
	if rec := h.from("GET", "/runs/"+linkRun, "192.0.2.10:5000", bearer); !strings.Contains(rec.Body.String(), `href="../runs"`) {
		t.Errorf("a signed-in reader is not shown the list's link")
	}
}

// TestExpiredPageLinkSaysHowToReadTheRun: the page an expired link answers
// says until when it worked and every way to read the run this daemon
// offers, with no list link and no JSON.
func TestExpiredPageLinkSaysHowToReadTheRun(t *testing.T) {
	h, signer := pageLinkHarness(t, config.Auth{BearerToken: apiToken, BasicAuth: &config.BasicAuth{Username: "ops", Password: "pw"},
		TrustedProxy: &config.TrustedProxy{Header: "X-Forwarded-Email", From: []string{"10.0.3.7"}}})
	exp := time.Date(2026, 5, 31, 9, 30, 0, 0, time.UTC)
	rec := h.from("GET", "/runs/"+linkRun+"?"+signer.SignPage(linkRun, exp).Encode(), "192.0.2.10:5000", nil)
	if rec.Code != http.StatusForbidden || !isHTML(rec) || rec.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("expired: %d %s %q", rec.Code, rec.Header().Get("Content-Type"), rec.Header().Get("Cache-Control"))
	}
	doc := htmldoc.Parse(t, rec.Body.Bytes())
	got := htmldoc.Text(htmldoc.ByID(doc, "refused")) + "\n" + htmldoc.Text(htmldoc.Elements(doc, "main")[0])
	for _, want := range []string{
		"This link has expired",
		"This link to run " + linkRun + " worked until 2026-05-31 09:30 UTC.",
		"Links in Slack messages work for a limited time (web.link_ttl, 30 days by default).",
		"Open the run from a newer message about it: each update of the Slack thread's first message carries a fresh link.",
		"Sign in through the single sign-on proxy in front of this daemon and open the page through it.",
		"Sign in with this daemon's user name and password: your browser asks for them when you open this run's page",
		"With the API's bearer token (a browser cannot send it): GET /api/v1/runs/" + linkRun + " with the header Authorization: Bearer <token>.",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the expired page lacks %q:\n%s", want, got)
		}
	}
	var hrefs []string
	for _, a := range htmldoc.Elements(doc, "a") {
		hrefs = append(hrefs, htmldoc.Attr(a, "href"))
	}
	if len(hrefs) != 1 || htmldoc.Resolve(t, "http://ac.example/runs/"+linkRun+"?exp=1&sig=x", hrefs[0]) != "http://ac.example/runs/"+linkRun {
		t.Fatalf("links on the expired page %v, want only the run's page without the token", hrefs)
	}
}

// TestTrustedProxyHeader: the header authenticates the pages (and the
// artifacts they show) only from a configured address, only when it names
// someone, only once; never the API; never because of X-Forwarded-For.
func TestTrustedProxyHeader(t *testing.T) {
	h, _ := pageLinkHarness(t, config.Auth{BearerToken: apiToken,
		TrustedProxy: &config.TrustedProxy{Header: "X-Forwarded-Email", From: []string{"10.0.3.7", "10.42.0.0/16"}}})
	email := func(v ...string) http.Header { return http.Header{"X-Forwarded-Email": v} }
	cases := []struct {
		name, path, remote string
		header             http.Header
		code               int
	}{
		{"from the proxy", "/runs/" + linkRun, "10.0.3.7:41000", email("ana@example.com"), 200},
		{"the list from the proxy", "/runs", "10.0.3.7:41000", email("ana@example.com"), 200},
		{"HEAD from the proxy", "/runs/" + linkRun, "10.0.3.7:41000", email("ana@example.com"), 200},
		{"from the proxy's range", "/runs/" + linkRun, "10.42.9.1:41000", email("ana@example.com"), 200},
		{"from the proxy over IPv6-mapped IPv4", "/runs/" + linkRun, "[::ffff:10.0.3.7]:41000", email("ana@example.com"), 200},
		{"an artifact from the proxy", "/artifacts/" + linkRun + "/" + linkChart, "10.0.3.7:41000", email("ana@example.com"), 200},
		{"from another address", "/runs/" + linkRun, "192.0.2.10:41000", email("ana@example.com"), 401},
		{"the list from another address", "/runs", "192.0.2.10:41000", email("ana@example.com"), 401},
		{"from another address claiming the proxy", "/runs/" + linkRun, "192.0.2.10:41000",
			http.Header{"X-Forwarded-Email": {"ana@example.com"}, "X-Forwarded-For": {"10.0.3.7"}, "X-Real-Ip": {"10.0.3.7"}}, 401},
		{"an artifact from another address", "/artifacts/" + linkRun + "/" + linkChart, "192.0.2.10:41000", email("ana@example.com"), 401},
		{"empty header from the proxy", "/runs/" + linkRun, "10.0.3.7:41000", email(""), 401},
		{"blank header from the proxy", "/runs/" + linkRun, "10.0.3.7:41000", email("  "), 401},
		{"no header from the proxy", "/runs/" + linkRun, "10.0.3.7:41000", nil, 401},
		{"two headers from the proxy", "/runs/" + linkRun, "10.0.3.7:41000", email("ana@example.com", "eve@example.com"), 401},
		{"the API from the proxy", "/api/v1/runs/" + linkRun, "10.0.3.7:41000", email("ana@example.com"), 401},
		{"the API's list from the proxy", "/api/v1/runs", "10.0.3.7:41000", email("ana@example.com"), 401},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			method := "GET"
			if strings.HasPrefix(c.name, "HEAD") {
				method = "HEAD"
			}
			rec := h.from(method, c.path, c.remote, c.header)
			if rec.Code != c.code {
				t.Fatalf("%s %s from %s: %d, want %d\n%s", method, c.path, c.remote, rec.Code, c.code, rec.Body.String())
			}
		})
	}
	if rec := h.from("GET", "/runs/"+linkRun, "10.0.3.7:41000", email("ana@example.com")); !strings.Contains(rec.Body.String(), `href="../runs"`) {
		t.Errorf("a reader signed in through the proxy is not shown the list's link")
	}
	var whys []string
	for _, e := range h.logs.FilterMessage("Request refused: not authenticated.").All() {
		whys = append(whys, e.ContextMap()["why"].(string))
	}
	all := strings.Join(whys, "\n")
	for _, want := range []string{"X-Forwarded-Email from 192.0.2.10:41000, not an address in web.auth.trusted_proxy.from: ignored",
		"an empty X-Forwarded-Email header from the trusted proxy", "more than one X-Forwarded-Email header: ignored",
		"the trusted proxy's X-Forwarded-Email authenticates only the run pages"} {
		if !strings.Contains(all, want) {
			t.Errorf("no refusal logged %q; logged:\n%s", want, all)
		}
	}
	if strings.Contains(all, "ana@example.com") {
		t.Errorf("a refusal's log carries what was sent: %s", all)
	}

	// A proxy alone guards the pages (web.allow_unauthenticated leaves the API open).
	only, _ := pageLinkHarness(t, config.Auth{TrustedProxy: &config.TrustedProxy{Header: "X-Forwarded-Email", From: []string{"10.0.3.7"}}})
	if rec := only.from("GET", "/runs/"+linkRun, "192.0.2.10:41000", email("ana@example.com")); rec.Code != 401 {
		t.Errorf("proxy only, from another address: %d, want 401", rec.Code)
	}
	if rec := only.from("GET", "/runs/"+linkRun, "10.0.3.7:41000", email("ana@example.com")); rec.Code != 200 {
		t.Errorf("proxy only, from the proxy: %d, want 200", rec.Code)
	}
}
