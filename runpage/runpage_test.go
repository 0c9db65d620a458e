package runpage

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/htmldoc"

	"golang.org/x/net/html"

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

// fakeProfile answers a run's profiler lease and events.
type fakeProfile struct{ p runs.RunProfile }

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

// TestRunPageShowsTheRun: the verdict with its evidence, contributing,
// advice, untrusted signals and basis; the history as "was X, now Y"; the
// chart inline through a link signed for it; the slowest traces linked to the backend; the profile's
// families (largest first) and top kernels with the comparison; every
// artifact's link signed for its key; each step's status, reason and duration.
func TestRunPageShowsTheRun(t *testing.T) {
	f := newPageServer(t)
	page := f.srv.URL + "/runs/" + pageRun
	res, body := fetch(t, page, nil)
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET %s: %d %s\n%s", page, res.StatusCode, res.Header.Get("Content-Type"), body)
	}
	if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "script-src") {
		t.Fatalf("CSP %q: want no script allowed", csp)
	}
	doc := htmldoc.Parse(t, body)
	verdict := htmldoc.Text(htmldoc.ByID(doc, "verdict"))
	for _, want := range []string{"kv-pressure", "KV cache 98% full (threshold 95%)", "overload", "raise gpu_memory_utilization",
		"prompt_len: window too short", "mean prefill time: absolute threshold (no baseline)"} {
		if !strings.Contains(verdict, want) {
			t.Errorf("verdict section lacks %q: %q", want, verdict)
		}
	}
	if sc := htmldoc.Text(htmldoc.ByID(doc, "scope")); sc != "scope: single-instance — only this instance: KV usage 98% vs peers' median 40% (3 peers)" {
		t.Errorf("scope: %q", sc)
	}
	if a := vocab.FactorAdvice(vocab.FactorSingleInstance)[0]; !strings.Contains(verdict, a) {
		t.Errorf("verdict section lacks the single-instance advice %q: %q", a, verdict)
	}
	if h := htmldoc.Text(htmldoc.ByID(doc, "history")); !strings.Contains(h, "was overload, now kv-pressure") || !strings.Contains(h, "preliminary") || !strings.Contains(h, "waiting for scrape") {
		t.Errorf("history: %q", h)
	}

	imgs := htmldoc.Elements(htmldoc.ByID(doc, "charts"), "img")
	if len(imgs) != 1 {
		t.Fatalf("%d chart images, want 1", len(imgs))
	}
	src := htmldoc.Resolve(t, page, htmldoc.Attr(imgs[0], "src"))
	if !strings.Contains(src, "/artifacts/"+pageRun+"/") || !strings.Contains(src, "sig=") {
		t.Fatalf("chart src %q: want the signed artifact route", src)
	}
	f.checkArtifactLink(t, src, pageChart)

	var hrefs []string
	for _, a := range htmldoc.Elements(htmldoc.ByID(doc, "artifacts"), "a") {
		hrefs = append(hrefs, htmldoc.Attr(a, "href"))
	}
	if len(hrefs) != 3 { // chart, spans, manifest
		t.Fatalf("artifact links %v, want 3", hrefs)
	}
	for i, key := range []string{pageChart, pageSpans, pageMan} {
		f.checkArtifactLink(t, htmldoc.Resolve(t, page, hrefs[i]), key)
	}
	if a := htmldoc.Cells(htmldoc.ByID(doc, "artifacts")); !slices.Contains(a, "2.0 KiB") || !slices.Contains(a, pageSpans) || !slices.Contains(a, "spans.json") {
		t.Errorf("artifacts table lacks the size, key or name: %q", a)
	}

	traces := htmldoc.ByID(doc, "traces")
	links := htmldoc.Elements(traces, "a")
	if len(links) != 1 || htmldoc.Attr(links[0], "href") != "http://jaeger:16686/trace/4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("trace links %v: want only the backend's http link (javascript: is no link)", links)
	}
	if tt := htmldoc.Text(traces); !strings.Contains(tt, "4.25 s") || !strings.Contains(tt, "8000") || !strings.Contains(tt, "t2") {
		t.Errorf("traces: %q", tt)
	}

	prof := htmldoc.Text(doc)
	for _, want := range []string{"top family attention", "GPU idle 12.5%",
		"attention 61.0% 20% +41 points abnormal GEMM 30.0% ≈ 30% about the same comm 0.0% ≈ 0% about the same",
		"flash_fwd_kernel<" + hostile + ">", "55.0%", "123456", "Compared with the healthy baseline: run 0197-old", "recording"} {
		if !strings.Contains(prof, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	steps := htmldoc.Text(htmldoc.ByID(doc, "steps"))
	for _, want := range []string{"vllm/kv_chart chart", "1.2 s", "vllm/scrape scrape", "failed", "15.0 s", "timeout", "31.0 s"} {
		if !strings.Contains(steps, want) {
			t.Errorf("steps lack %q: %q", want, steps)
		}
	}
	if fb := htmldoc.Text(htmldoc.ByID(doc, "feedback")); !strings.Contains(fb, "ana kv-pressure right") {
		t.Errorf("feedback: %q", fb)
	}
}

// TestRunPageEscapesUntrustedValues: a label, an annotation and a kernel
// name carrying markup end as text: no script or injected element or
// attribute appears in the DOM, and the values read back literally.
func TestRunPageEscapesUntrustedValues(t *testing.T) {
	f := newPageServer(t)
	_, body := fetch(t, f.srv.URL+"/runs/"+pageRun, nil)
	if bytes.Contains(body, []byte("<script")) || bytes.Contains(body, []byte("<b>rising")) || bytes.Contains(body, []byte("javascript:")) {
		t.Fatalf("markup of an untrusted value reached the page unescaped")
	}
	doc := htmldoc.Parse(t, body)
	if n := len(htmldoc.Elements(doc, "script")); n != 0 {
		t.Fatalf("%d script elements", n)
	}
	htmldoc.Walk(doc, func(n *html.Node) {
		if n.Type == html.ElementNode && (htmldoc.Attr(n, "onerror") != "" || (n.Data == "img" && htmldoc.Attr(n, "src") == "x") || n.Data == "b") {
			t.Fatalf("an injected element or attribute: <%s %v>", n.Data, n.Attr)
		}
	})
	labels := htmldoc.Text(htmldoc.ByID(doc, "labels"))
	if !strings.Contains(labels, "team "+hostile) || !strings.Contains(labels, `p99 TTFT "4.2s" & <b>rising</b>`) {
		t.Fatalf("the values do not read back literally: %q", labels)
	}
}

// TestRunsPageLists: newest first, each row linking its page (which answers
// 200), the filters handed to the run service, a cursor it never handed out 400.
func TestRunsPageLists(t *testing.T) {
	f := newPageServer(t)
	list := f.srv.URL + "/runs"
	res, body := fetch(t, list, nil)
	if res.StatusCode != 200 {
		t.Fatalf("GET /runs: %d\n%s", res.StatusCode, body)
	}
	rows := htmldoc.Elements(htmldoc.ByID(htmldoc.Parse(t, body), "runs"), "a")
	if len(rows) != 2 || htmldoc.Text(rows[0]) != pageRun || htmldoc.Text(rows[1]) != "0197-older" {
		t.Fatalf("rows %v: want the newest first", rows)
	}
	for _, a := range rows {
		u := htmldoc.Resolve(t, list, htmldoc.Attr(a, "href"))
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
	if res, _ := fetch(t, list+"?cursor=nope", nil); res.StatusCode != http.StatusBadRequest {
		t.Errorf("GET /runs?cursor=nope: %d, want 400", res.StatusCode)
	}
}

// checkArtifactLink: u is the artifact route's address of key in the page's
// run, with a token the route accepts (package handlers serves the file).
func (f *pageFixture) checkArtifactLink(t *testing.T, u, key string) {
	t.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	want := "/artifacts/" + pageRun + "/" + key
	if pu.Path != want {
		t.Fatalf("artifact link %s: want the route %s", u, want)
	}
	if err := f.signer.Verify(pageRun, key, pu.Query(), time.Now()); err != nil {
		t.Fatalf("artifact link %s: its token is refused: %v", u, err)
	}
}
