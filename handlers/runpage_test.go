package handlers

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/net/html"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/links"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

const (
	pageRun   = "0198-page-run"
	pageChart = "2026/05/01/VLLMHighTTFT/0198-page-run/vllm/kv_chart/chart.png"
	pageSpans = "2026/05/01/VLLMHighTTFT/0198-page-run/vllm/traces/spans.json"
	pageMan   = "2026/05/01/VLLMHighTTFT/0198-page-run/manifest.json"
	hostile   = `"><script>alert('x')</script><img src=x onerror=alert(1)>`
)

// fakeProfile answers RunProfile only (the page reads nothing else of it).
type fakeProfile struct {
	Profiling
	p runs.RunProfile
}

func (f fakeProfile) RunProfile(_ context.Context, id string) (runs.RunProfile, error) {
	if id != pageRun {
		return runs.RunProfile{}, fmt.Errorf("%w: %s", runs.ErrNotFound, id)
	}
	return f.p, nil
}

// pageRunFixture is a finished run with every section the page shows; the
// profile step's findings are JSON-shaped (as read back from the store), the
// traces step's Go-shaped (as a step made them): both must render.
func pageRunFixture(png []byte) *runs.Run {
	at := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	fin := at.Add(95 * time.Second)
	kv := &vocab.Verdict{ID: vocab.VerdictKVPressure, Scope: vocab.ScopeSingle,
		Evidence:     []string{"KV cache 98% full (threshold 95%)", "only this instance: KV usage 98% vs peers' median 40% (3 peers)"},
		Contributing: []string{"overload", vocab.FactorSingleInstance}, Advice: []string{"raise gpu_memory_utilization"},
		Untrusted: []string{"prompt_len: window too short"},
		Basis:     map[string]string{vocab.SigPrefillMean: vocab.BasisAbsolute, vocab.SigPromptTokensNow: vocab.BasisBefore, "queue_shape": "novel-basis"}}
	pre := &vocab.Verdict{ID: vocab.VerdictOverload, Preliminary: true}
	return &runs.Run{ID: pageRun, Alertname: "VLLMHighTTFT", Status: vocab.StatusSucceeded,
		Labels:      map[string]string{"alertname": "VLLMHighTTFT", "instance": "10.0.0.7:8000", "model_name": "meta-llama/Llama-3.1-8B-Instruct", "team": hostile},
		Annotations: map[string]string{"summary": `p99 TTFT "4.2s" & <b>rising</b>`},
		StartsAt:    at, CreatedAt: at, StartedAt: &at, FinishedAt: &fin, Verdict: kv, Manifest: pageMan,
		Verdicts: []runs.VerdictEntry{
			{Kind: runs.VerdictPreliminary, Plan: "vllm", Step: "triage", At: at.Add(20 * time.Second), Verdict: pre, Waiting: []string{"scrape"}},
			{Kind: runs.VerdictRefined, Plan: "vllm", Step: "triage", At: at.Add(60 * time.Second), Verdict: kv, Was: "overload"},
		},
		Steps: []executor.StepRecord{
			{Plan: "vllm", ID: "kv_chart", Kind: "chart", Tier: vocab.TierMetrics, Status: "succeeded", DurationMS: 1234,
				StartedAt: at.Add(2 * time.Second), FinishedAt: at.Add(3234 * time.Millisecond),
				Summary:   "KV cache usage: 1 series",
				Artifacts: []vocab.Artifact{{Name: "chart.png", Key: pageChart, ContentType: "image/png", Size: int64(len(png))}}},
			{Plan: "vllm", ID: "traces", Kind: "traces", Tier: vocab.TierMetrics, Status: "succeeded", DurationMS: 800,
				StartedAt: at.Add(61 * time.Second), FinishedAt: at.Add(61800 * time.Millisecond),
				Findings: map[string]any{"slowest": []any{
					map[string]any{"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "ttft": 4.25, "queue": 3.5, "prefill": 0.5,
						"decode": 1.0, "e2e": 5.25, "prompt_tokens": 8000, "output_tokens": 120, "link": "http://jaeger:16686/trace/4bf92f3577b34da6a3ce929d0e0e4736"},
					map[string]any{"trace_id": "t2", "ttft": 3.0, "link": "javascript:alert(1)"},
				}},
				Artifacts: []vocab.Artifact{{Name: "spans.json", Key: pageSpans, ContentType: "application/json", Size: 2048}}},
			{Plan: "vllm", ID: "profile", Kind: "profile", Tier: vocab.TierProfile, Status: "succeeded", DurationMS: 31000,
				StartedAt: at.Add(62 * time.Second), FinishedAt: at.Add(93 * time.Second),
				Findings: map[string]any{"top_family": "attention", "idle_share": 0.125,
					"families":      map[string]any{"attention": 0.61, "gemm": 0.3, "comm": 0.0},
					"top_kernels":   []any{map[string]any{"name": "flash_fwd_kernel<" + hostile + ">", "family": "attention", "share": 0.55, "gpu_us": 123456.0}},
					"compared_with": map[string]any{"run_id": "0197-old", "taken_at": "2026-04-30T10:00:00Z", "baseline": true},
					"shift":         []any{map[string]any{"family": "attention", "share": 0.61, "baseline": 0.20}}}},
			{Plan: "vllm", ID: "scrape", Kind: "scrape", Tier: vocab.TierMetrics, Status: "failed", Reason: "timeout", DurationMS: 15000,
				StartedAt: at.Add(2 * time.Second), FinishedAt: at.Add(17 * time.Second)},
		},
		Feedback: []runs.Feedback{{Verdict: vocab.VerdictKVPressure, Correct: true, User: runs.User{ID: "U1", Name: "ana"}, At: fin}},
	}
}

type pageFixture struct {
	srv  *httptest.Server
	runs *fakeRuns
	png  []byte
}

// newPageServer serves the pages from a real Server with the artifact route
// on a local store holding the chart and the manifest.
func newPageServer(t *testing.T, auth config.Auth) *pageFixture {
	t.Helper()
	ctx := context.Background()
	f := &pageFixture{runs: newFakeRuns(), png: append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{1, 2, 3}, 300)...)}
	store := newLocal(t)
	for key, b := range map[string][]byte{pageChart: f.png, pageSpans: []byte(`[]`), pageMan: []byte(`{}`)} {
		ct := "application/json"
		if strings.HasSuffix(key, ".png") {
			ct = "image/png"
		}
		if _, err := store.Put(ctx, key, bytes.NewReader(b), vocab.ObjectMeta{ContentType: ct}); err != nil {
			t.Fatal(err)
		}
	}
	f.runs.runs = append(f.runs.runs, &runs.Run{ID: "0197-older", Alertname: "VLLMHighTTFT", Status: vocab.StatusFailed},
		pageRunFixture(f.png))
	signer, err := links.NewSigner([]byte("runpage-test-key-0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	ev := runs.ProfileEvent{RunID: pageRun, Target: "http://10.0.0.7:8000", At: time.Date(2026, 5, 1, 10, 0, 30, 0, time.UTC), Actor: "replica-a", Event: "recording"}
	s, err := New(Options{Runs: f.runs, Registry: prometheus.NewRegistry(), Log: zap.NewNop(), Auth: auth,
		Profiling: fakeProfile{p: runs.RunProfile{Events: []runs.ProfileEvent{ev}}},
		Artifacts: &ArtifactOptions{Runs: runArtifacts{pageRun: {pageChart, pageSpans, pageMan}}, Store: store, Links: signer}})
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(s)
	t.Cleanup(f.srv.Close)
	return f
}

func fetch(t *testing.T, u string, hdr http.Header) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	for k, v := range hdr {
		req.Header[k] = v
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, b
}

// node helpers over the parsed page.
func parse(t *testing.T, b []byte) *html.Node {
	t.Helper()
	doc, err := html.Parse(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

func walk(n *html.Node, f func(*html.Node)) {
	f(n)
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		walk(c, f)
	}
}

func attr(n *html.Node, name string) string {
	for _, a := range n.Attr {
		if a.Key == name {
			return a.Val
		}
	}
	return ""
}

func byID(doc *html.Node, id string) *html.Node {
	var out *html.Node
	walk(doc, func(n *html.Node) {
		if out == nil && n.Type == html.ElementNode && attr(n, "id") == id {
			out = n
		}
	})
	return out
}

func text(n *html.Node) string {
	if n == nil {
		return ""
	}
	var b strings.Builder
	walk(n, func(c *html.Node) {
		if c.Type == html.TextNode {
			b.WriteString(c.Data + " ")
		}
	})
	return strings.Join(strings.Fields(b.String()), " ")
}

func elements(doc *html.Node, tag string) []*html.Node {
	var out []*html.Node
	if doc == nil {
		return nil
	}
	walk(doc, func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == tag {
			out = append(out, n)
		}
	})
	return out
}

// cells is the text of each table cell under n as a browser reads it: its
// text nodes joined as they are (a key or a name split into parts to wrap
// between them, <wbr> or span.seg, reads whole).
func cells(n *html.Node) []string {
	var out []string
	for _, td := range elements(n, "td") {
		var b strings.Builder
		walk(td, func(c *html.Node) {
			if c.Type == html.TextNode {
				b.WriteString(c.Data)
			}
		})
		out = append(out, strings.TrimSpace(b.String()))
	}
	return out
}

// resolve is href as a browser resolves it against the page's URL.
func resolve(t *testing.T, page, href string) string {
	t.Helper()
	base, err := url.Parse(page)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := url.Parse(href)
	if err != nil {
		t.Fatalf("href %q: %v", href, err)
	}
	return base.ResolveReference(ref).String()
}

// TestRunPageShowsTheRun: the verdict with its evidence, contributing,
// advice, untrusted signals and basis; the history as "was X, now Y"; the
// chart inline through a signed link that answers the PNG without
// credentials; the slowest traces linked to the backend; the profile's
// families (largest first) and top kernels with the comparison; every
// artifact's link answering 200; each step's status, reason and duration.
func TestRunPageShowsTheRun(t *testing.T) {
	f := newPageServer(t, config.Auth{})
	page := f.srv.URL + "/runs/" + pageRun
	res, body := fetch(t, page, nil)
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET %s: %d %s\n%s", page, res.StatusCode, res.Header.Get("Content-Type"), body)
	}
	if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "script-src") {
		t.Fatalf("CSP %q: want no script allowed", csp)
	}
	doc := parse(t, body)
	verdict := text(byID(doc, "verdict"))
	for _, want := range []string{"kv-pressure", "KV cache 98% full (threshold 95%)", "overload", "raise gpu_memory_utilization",
		"prompt_len: window too short", "mean prefill time: absolute threshold (no baseline)"} {
		if !strings.Contains(verdict, want) {
			t.Errorf("verdict section lacks %q: %q", want, verdict)
		}
	}
	if sc := text(byID(doc, "scope")); sc != "scope: single-instance — only this instance: KV usage 98% vs peers' median 40% (3 peers)" {
		t.Errorf("scope: %q", sc)
	}
	if a := vocab.FactorAdvice(vocab.FactorSingleInstance)[0]; !strings.Contains(verdict, a) {
		t.Errorf("verdict section lacks the single-instance advice %q: %q", a, verdict)
	}
	if h := text(byID(doc, "history")); !strings.Contains(h, "was overload, now kv-pressure") || !strings.Contains(h, "preliminary") || !strings.Contains(h, "waiting for scrape") {
		t.Errorf("history: %q", h)
	}

	imgs := elements(byID(doc, "charts"), "img")
	if len(imgs) != 1 {
		t.Fatalf("%d chart images, want 1", len(imgs))
	}
	src := resolve(t, page, attr(imgs[0], "src"))
	if !strings.Contains(src, "/artifacts/"+pageRun+"/") || !strings.Contains(src, "sig=") {
		t.Fatalf("chart src %q: want the signed artifact route", src)
	}
	res, got := fetch(t, src, nil)
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "image/png" || !bytes.Equal(got, f.png) {
		t.Fatalf("chart %s: %d %s, %d bytes (want the %d stored)", src, res.StatusCode, res.Header.Get("Content-Type"), len(got), len(f.png))
	}

	var hrefs []string
	for _, a := range elements(byID(doc, "artifacts"), "a") {
		hrefs = append(hrefs, attr(a, "href"))
	}
	if len(hrefs) != 3 { // chart, spans, manifest
		t.Fatalf("artifact links %v, want 3", hrefs)
	}
	for _, h := range hrefs {
		if res, b := fetch(t, resolve(t, page, h), nil); res.StatusCode != 200 {
			t.Errorf("artifact %s: %d %s", h, res.StatusCode, b)
		}
	}
	if a := cells(byID(doc, "artifacts")); !slices.Contains(a, "2.0 KiB") || !slices.Contains(a, pageSpans) || !slices.Contains(a, "spans.json") {
		t.Errorf("artifacts table lacks the size, key or name: %q", a)
	}

	traces := byID(doc, "traces")
	links := elements(traces, "a")
	if len(links) != 1 || attr(links[0], "href") != "http://jaeger:16686/trace/4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("trace links %v: want only the backend's http link (javascript: is no link)", links)
	}
	if tt := text(traces); !strings.Contains(tt, "4.25 s") || !strings.Contains(tt, "8000") || !strings.Contains(tt, "t2") {
		t.Errorf("traces: %q", tt)
	}

	prof := text(doc)
	for _, want := range []string{"top family attention", "GPU idle 12.5%",
		"attention 61.0% 20% +41 points abnormal GEMM 30.0% ≈ 30% about the same comm 0.0% ≈ 0% about the same",
		"flash_fwd_kernel<" + hostile + ">", "55.0%", "123456", "Compared with the healthy baseline: run 0197-old", "recording"} {
		if !strings.Contains(prof, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	steps := text(byID(doc, "steps"))
	for _, want := range []string{"vllm/kv_chart chart", "1.2 s", "vllm/scrape scrape", "failed", "15.0 s", "timeout", "31.0 s"} {
		if !strings.Contains(steps, want) {
			t.Errorf("steps lack %q: %q", want, steps)
		}
	}
	if fb := text(byID(doc, "feedback")); !strings.Contains(fb, "ana kv-pressure right") {
		t.Errorf("feedback: %q", fb)
	}
}

// TestRunPageEscapesUntrustedValues: a label, an annotation and a kernel
// name carrying markup end as text: no script or injected element or
// attribute appears in the DOM, and the values read back literally.
func TestRunPageEscapesUntrustedValues(t *testing.T) {
	f := newPageServer(t, config.Auth{})
	_, body := fetch(t, f.srv.URL+"/runs/"+pageRun, nil)
	if bytes.Contains(body, []byte("<script")) || bytes.Contains(body, []byte("<b>rising")) || bytes.Contains(body, []byte("javascript:")) {
		t.Fatalf("markup of an untrusted value reached the page unescaped")
	}
	doc := parse(t, body)
	if n := len(elements(doc, "script")); n != 0 {
		t.Fatalf("%d script elements", n)
	}
	walk(doc, func(n *html.Node) {
		if n.Type == html.ElementNode && (attr(n, "onerror") != "" || (n.Data == "img" && attr(n, "src") == "x") || n.Data == "b") {
			t.Fatalf("an injected element or attribute: <%s %v>", n.Data, n.Attr)
		}
	})
	labels := text(byID(doc, "labels"))
	if !strings.Contains(labels, "team "+hostile) || !strings.Contains(labels, `p99 TTFT "4.2s" & <b>rising</b>`) {
		t.Fatalf("the values do not read back literally: %q", labels)
	}
}

// TestRunPagesAuth: both pages are held to the API's auth: 401 without or
// with wrong credentials, 200 with them; basic auth is what a browser can send.
func TestRunPagesAuth(t *testing.T) {
	f := newPageServer(t, config.Auth{BasicAuth: &config.BasicAuth{Username: "ops", Password: "s3cret"}})
	for _, p := range []string{"/runs", "/runs/" + pageRun, "/runs/nope"} {
		if res, _ := fetch(t, f.srv.URL+p, nil); res.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(res.Header.Get("WWW-Authenticate"), "Basic") {
			t.Errorf("GET %s without credentials: %d %q, want 401 with a Basic challenge", p, res.StatusCode, res.Header.Get("WWW-Authenticate"))
		}
		req, _ := http.NewRequest("GET", f.srv.URL+p, nil)
		req.SetBasicAuth("ops", "wrong")
		if res, _ := fetch(t, f.srv.URL+p, req.Header); res.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s with a wrong password: %d", p, res.StatusCode)
		}
	}
	req, _ := http.NewRequest("GET", "/", nil)
	req.SetBasicAuth("ops", "s3cret")
	if res, b := fetch(t, f.srv.URL+"/runs/"+pageRun, req.Header); res.StatusCode != 200 || !bytes.Contains(b, []byte("kv-pressure")) {
		t.Fatalf("with credentials: %d", res.StatusCode)
	}
	if res, b := fetch(t, f.srv.URL+"/runs/nope", req.Header); res.StatusCode != http.StatusNotFound ||
		!strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") || !bytes.Contains(b, []byte(`no run &#34;nope&#34;`)) {
		t.Fatalf("unknown run: %d %s\n%s", res.StatusCode, res.Header.Get("Content-Type"), b)
	}

	tok := newPageServer(t, config.Auth{BearerToken: "page-token"})
	if res, _ := fetch(t, tok.srv.URL+"/runs", nil); res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("bearer-guarded list without a token: %d", res.StatusCode)
	}
	if res, _ := fetch(t, tok.srv.URL+"/runs", http.Header{"Authorization": {"Bearer page-token"}}); res.StatusCode != 200 {
		t.Fatalf("bearer-guarded list with the token: %d", res.StatusCode)
	}
}

// TestRunsPageLists: newest first, each row linking its page (which answers
// 200), the filters handed to the run service, a bad status or limit 400.
func TestRunsPageLists(t *testing.T) {
	f := newPageServer(t, config.Auth{})
	list := f.srv.URL + "/runs"
	res, body := fetch(t, list, nil)
	if res.StatusCode != 200 {
		t.Fatalf("GET /runs: %d\n%s", res.StatusCode, body)
	}
	rows := elements(byID(parse(t, body), "runs"), "a")
	if len(rows) != 2 || text(rows[0]) != pageRun || text(rows[1]) != "0197-older" {
		t.Fatalf("rows %v: want the newest first", rows)
	}
	for _, a := range rows {
		u := resolve(t, list, attr(a, "href"))
		if res, _ := fetch(t, u, nil); res.StatusCode != 200 {
			t.Errorf("row link %s: %d", u, res.StatusCode)
		}
	}
	if res, body = fetch(t, list+"?alertname=VLLMHighTTFT&status=failed&limit=7", nil); res.StatusCode != 200 {
		t.Fatalf("filtered: %d", res.StatusCode)
	}
	if q := f.runs.lastList; q.Alertname != "VLLMHighTTFT" || q.Status != "failed" || q.Limit != 7 {
		t.Fatalf("query handed on: %+v", q)
	}
	if !bytes.Contains(body, []byte(`<option value="failed" selected>`)) {
		t.Errorf("the status filter is not kept in the form")
	}
	for _, q := range []string{"?status=bogus", "?limit=0", "?limit=501", "?cursor=nope"} {
		if res, _ := fetch(t, list+q, nil); res.StatusCode != http.StatusBadRequest {
			t.Errorf("GET /runs%s: %d, want 400", q, res.StatusCode)
		}
	}
}
