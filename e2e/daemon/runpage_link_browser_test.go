package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	_ "image/png" // decode the screenshot
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/autocapture/autocapture/internal/testkit/slackstub"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/vocab"
)

// TestRunPageLinkFromSlackInBrowser: the "Run page" button of a run's Slack
// parent opens the run's page in a browser although the daemon guards its
// API with a bearer token (which a browser cannot send), because the button
// carries a page link signed for that run. The real daemon posts the thread
// to the Slack stand-in; the URL is taken out of the parent as the stand-in
// recorded it (as posted, and after the last edit) and opened in headless
// Chromium over the DevTools protocol, which must show the run — its alert
// and status — and load its artifact links without credentials. The same
// link altered, or put on another run's page, on the run list or on the API,
// is refused in the browser. A screenshot of the page opened from the link
// is kept in $AUTOCAPTURE_TEST_ARTIFACTS (else a temp dir) and its path logged.
func TestRunPageLinkFromSlackInBrowser(t *testing.T) {
	t.Parallel()
	chromium := testenv.Tool(t, "chromium")
	stub := newSlack(t)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"path":%q}`, r.URL.Path)
	}))
	defer target.Close()

	port := testenv.FreePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	d := startDaemon(t, &daemonOpts{Port: port, Token: "page-link-api-token", Web: "  external_url: " + base + "\n",
		Playbooks: fmt.Sprintf(linkPlaybook, target.URL), Notify: slackNotify(stub)})

	id := fireAndFinish(t, d, stub, "RunPageLinkAlert", "pagelink00000001")
	other := fireAndFinish(t, d, stub, "OtherPageLinkAlert", "pagelink00000002")

	parent := threadOf(t, stub, id)
	posted := runPageButton(t, parent.Revisions[0].Blocks)
	edited := runPageButton(t, parent.Blocks)
	for _, u := range []string{posted, edited} {
		if !strings.HasPrefix(u, base+"/runs/"+url.PathEscape(id)+"?") || !strings.Contains(u, "sig=") || !strings.Contains(u, "exp=") {
			t.Fatalf("the parent's Run page link %q: want %s/runs/%s with a token", u, base, id)
		}
	}
	if len(parent.Revisions) < 2 {
		t.Fatalf("the parent was never edited (%d revisions): the test reads no edited link", len(parent.Revisions))
	}

	b := newBrowser(t, chromium)
	for name, u := range map[string]string{"as posted": posted, "after the last edit": edited} {
		code, text := b.open(t, u)
		if code != http.StatusOK {
			t.Fatalf("the Run page link %s: %d in the browser\n%s", name, code, text)
		}
		for _, want := range []string{"RunPageLinkAlert", id, string(vocab.StatusSucceeded)} {
			if !strings.Contains(text, want) {
				t.Errorf("the page opened from the link %s lacks %q:\n%s", name, want, text)
			}
		}
	}
	// The page's own links (its artifacts) work for the link's reader: the
	// browser names them as it resolved them, and each answers without
	// credentials.
	hrefs, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("a.artifact")).map(a => a.href)`))
	if err != nil {
		t.Fatalf("chromium: the page's artifact links: %v", err)
	}
	if len(hrefs) == 0 {
		t.Fatalf("the page opened from the link shows no artifact link")
	}
	for _, h := range hrefs {
		if res, err := http.Get(h); err != nil || res.StatusCode != 200 {
			t.Errorf("the page's artifact link %s without credentials: %v %v", h, res, err)
		} else {
			res.Body.Close()
		}
	}
	// A header link to the list, which would refuse this reader, is not shown.
	if n, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](`document.querySelectorAll('header a').length`)); err != nil || n != 0 {
		t.Errorf("the link reader's page links the list (%d header links, %v)", n, err)
	}
	b.screenshot(t, "runpage-from-slack-link.png")

	query := edited[strings.Index(edited, "?"):]
	sig := url.Values{}
	if q, err := url.ParseQuery(query[1:]); err == nil {
		sig = q
	}
	altered := url.Values{"exp": sig["exp"], "sig": {flipFirst(sig.Get("sig"))}}
	refusals := []struct {
		name, url string
		code      int
		says      string
	}{
		{"altered token", base + "/runs/" + url.PathEscape(id) + "?" + altered.Encode(), http.StatusForbidden, "This link does not open this run"},
		{"another run's page", base + "/runs/" + url.PathEscape(other) + query, http.StatusForbidden, "This link does not open this run"},
		{"the run list", base + "/runs" + query, http.StatusUnauthorized, "Sign-in needed"},
		{"the API", base + "/api/v1/runs/" + url.PathEscape(id) + query, http.StatusUnauthorized, "unauthorized"},
	}
	for _, r := range refusals {
		code, text := b.open(t, r.url)
		if code != r.code || !strings.Contains(text, r.says) {
			t.Errorf("%s in the browser: %d, want %d saying %q:\n%s", r.name, code, r.code, r.says, text)
		}
		if strings.Contains(text, "RunPageLinkAlert") || strings.Contains(text, "OtherPageLinkAlert") {
			t.Errorf("%s: the refusal shows a run:\n%s", r.name, text)
		}
	}
	if v := d.metric(t, `autocapture_link_refusals_total{reason="bad_signature",route="page"}`); v != 2 {
		t.Errorf("page link refusals counted %v, want 2 (the altered token, the other run)", v)
	}
}

// linkPlaybook is one http step against a target (%s): a run that finishes
// with one artifact.
const linkPlaybook = `playbooks:
  - name: pagelink
    match:
      - alertname=~"RunPageLinkAlert|OtherPageLinkAlert"
    steps:
      - id: fetch
        http: {url: "%s/state"}
`

// fireAndFinish fires one alert and waits for its run to finish and for
// its thread to say so; it returns the run's id.
func fireAndFinish(t *testing.T, d *daemon, stub *slackstub.Server, alertname, fingerprint string) string {
	t.Helper()
	code, b := d.post(t, webhookBody(alertname, fingerprint, "firing", time.Now().Add(-time.Minute)))
	id := runID(b)
	if code != 200 || id == "" {
		t.Fatalf("webhook: %d %s", code, b)
	}
	waitFor(t, 90*time.Second, "run "+id+" to finish", func() bool {
		r := d.run(t, id)
		return r.Status != vocab.StatusQueued && r.Status != vocab.StatusRunning
	})
	if r := d.run(t, id); r.Status != vocab.StatusSucceeded {
		t.Fatalf("run %s: %s, want succeeded: %+v", id, r.Status, r.Steps)
	}
	waitFor(t, 90*time.Second, "the thread of run "+id+" to show its end", func() bool {
		for _, m := range stub.Messages(slackChannel) {
			if md := m.Metadata; md != nil && md.EventPayload["run_id"] == id && strings.Contains(strings.Join(replyKeys(m), " "), "close/finished") {
				return true
			}
		}
		return false
	})
	return id
}

// runPageButton is the URL of the "Run page" button in a message's blocks.
func runPageButton(t *testing.T, blocks json.RawMessage) string {
	t.Helper()
	var bs []struct {
		Elements []struct {
			Type string          `json:"type"`
			Text json.RawMessage `json:"text"` // a button's is an object, a context's a string
			URL  string          `json:"url"`
		} `json:"elements"`
	}
	if err := json.Unmarshal(blocks, &bs); err != nil {
		t.Fatalf("the parent's blocks: %v", err)
	}
	for _, b := range bs {
		for _, e := range b.Elements {
			var label struct {
				Text string `json:"text"`
			}
			if e.Type == "button" && json.Unmarshal(e.Text, &label) == nil && label.Text == "Run page" {
				return e.URL
			}
		}
	}
	t.Fatalf("no Run page button in the parent: %s", blocks)
	return ""
}

// flipFirst changes a token's first character.
func flipFirst(s string) string {
	if strings.HasPrefix(s, "A") {
		return "B" + s[1:]
	}
	return "A" + s[1:]
}

// browser is one headless Chromium over the DevTools protocol, with no
// credentials of any kind: only what a link carries.
type browser struct{ ctx context.Context }

func newBrowser(t *testing.T, bin string) *browser {
	t.Helper()
	return &browser{ctx: headlessChrome(t, bin, 3*time.Minute, chromedp.WindowSize(1280, 1000))}
}

// open navigates to u and returns the document's status and the text the
// browser renders.
func (b *browser) open(t *testing.T, u string) (int, string) {
	t.Helper()
	res, err := chromedp.Run(b.ctx, chromedp.NavigateResponse(u))
	if err != nil {
		t.Fatalf("chromium: open %s: %v", u, err)
	}
	text, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : document.documentElement.innerText`))
	if err != nil {
		t.Fatalf("chromium: the text of %s: %v", u, err)
	}
	return int(res.Status), text
}

// screenshot saves the page shown now as name in $AUTOCAPTURE_TEST_ARTIFACTS
// (else a temp dir) and logs its path.
func (b *browser) screenshot(t *testing.T, name string) {
	t.Helper()
	dir := artifactDir(t)
	shot, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("chromium: screenshot: %v", err)
	}
	cfg, format, err := image.DecodeConfig(bytes.NewReader(shot))
	if err != nil || format != "png" || cfg.Width < 100 || cfg.Height < 100 {
		t.Fatalf("screenshot: %s %dx%d (%v)", format, cfg.Width, cfg.Height, err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("the run page opened from the Slack link: %s (%dx%d)", path, cfg.Width, cfg.Height)
}
