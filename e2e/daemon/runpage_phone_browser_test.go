package daemon

import (
	"bytes"
	"fmt"
	"image"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vllmsim"
)

// The run page read at a desk (1280 px) and on a phone (390 px), in headless
// Chromium over the DevTools protocol. The run is real: the daemon binary
// profiles a healthy simulated vLLM and keeps that capture as the model's
// baseline, then answers an alert on a second instance of the same model
// whose GEMM kernels are 8× slower (vllmsim's unexplained scenario) with a
// scrape, triage and a profile compared with the baseline. At each width the
// browser says where the headline sits and how wide the document is, and a
// full-page PNG is kept for a person to look at: in $AUTOCAPTURE_TEST_ARTIFACTS
// when set, else in the test's temporary folder (the paths are logged).

// phoneModel is the model both simulated instances serve (the profile
// baseline is kept per model).
const phoneModel = "meta-llama/Llama-3.1-8B-Instruct"

// phonePlaybook: a baseline capture for PhoneBaseline; for VLLMHighITL the
// instance's /metrics twice, triage over it, and a profile.
const phonePlaybook = `playbooks:
  - name: baseline
    match:
      - alertname="PhoneBaseline"
    steps:
      - id: profile
        timeout: 2m
        profile:
          duration: 3s
          stop_timeout: 30s
          baseline: true
          collect: {dir: '{{ .Labels.profiler_dir }}'}
  - name: vllm
    match:
      - alertname="VLLMHighITL"
    steps:
      - id: scrape
        timeout: 40s
        scrape: {gap: 5s}
      - id: triage
        triage:
          from: [scrape]
      - id: profile
        timeout: 2m
        profile:
          duration: 3s
          stop_timeout: 30s
          collect: {dir: '{{ .Labels.profiler_dir }}'}
`

// pageFacts is what the browser says of the rendered page.
type pageFacts struct {
	// FirstInHeadline: the first visible text below the site's banner is
	// the headline's; FirstText is that text.
	FirstInHeadline bool   `json:"firstInHeadline"`
	FirstText       string `json:"firstText"`
	// Above lists the visible elements of <main>, outside the headline,
	// whose top is above the headline's.
	Above        []string `json:"above"`
	HeadlineText string   `json:"headlineText"`
	HeadlineTop  float64  `json:"headlineTop"`
	HeadlineBot  float64  `json:"headlineBottom"`
	ViewportH    float64  `json:"viewportH"`
	ScrollWidth  int      `json:"scrollWidth"`
	// Overflowing lists the elements and text reaching past the viewport's
	// right edge outside a scrolling box (what makes a page scroll sideways).
	Overflowing []string `json:"overflowing"`
}

// pageFactsJS measures the page as laid out, once its images are in.
const pageFactsJS = `Promise.all(Array.from(document.images).map(i => i.complete ? null :
	new Promise(r => { i.addEventListener("load", r); i.addEventListener("error", r); }))).then(() => {
  const h = document.getElementById("headline"), banner = document.querySelector("header.top");
  const visible = r => r.width > 0 && r.height > 0;
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  let first = null;
  for (let n = walker.nextNode(); n && !first; n = walker.nextNode()) {
    if (!n.data.trim() || (banner && banner.contains(n)) || n.parentElement.closest("style,title,head")) continue;
    const rg = document.createRange(); rg.selectNodeContents(n);
    if (visible(rg.getBoundingClientRect())) first = n;
  }
  const hr = h ? h.getBoundingClientRect() : {top: 1e9, bottom: 1e9};
  const name = el => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") + (el.className ? "." + String(el.className).replace(/ /g, ".") : "");
  const above = [], over = [], vw = document.documentElement.clientWidth;
  for (const el of document.querySelectorAll("main *")) {
    const r = el.getBoundingClientRect();
    if (!visible(r)) continue;
    if (h && !h.contains(el) && r.top < hr.top) above.push(name(el));
    if (r.right > vw + 0.5 && !el.closest(".scroll")) over.push(name(el) + " right=" + Math.round(r.right));
  }
  const texts = document.createTreeWalker(document.querySelector("main"), NodeFilter.SHOW_TEXT);
  for (let n = texts.nextNode(); n; n = texts.nextNode()) {
    if (!n.data.trim() || n.parentElement.closest(".scroll")) continue;
    const rg = document.createRange(); rg.selectNodeContents(n);
    const r = rg.getBoundingClientRect();
    if (r.right > vw + 0.5) over.push(name(n.parentElement) + " text " + JSON.stringify(n.data.trim().slice(0, 40)) + " right=" + Math.round(r.right));
  }
  return {firstInHeadline: !!(h && first && h.contains(first)), firstText: first ? first.data.trim().slice(0, 80) : "",
    above, headlineText: h ? document.getElementById("headline-text").innerText : "",
    headlineTop: hr.top, headlineBottom: hr.bottom, viewportH: innerHeight,
    scrollWidth: document.documentElement.scrollWidth, overflowing: over.slice(0, 20)};
})`

func TestRunPagePhoneInBrowser(t *testing.T) {
	t.Parallel()
	chromium := testenv.Tool(t, "chromium")
	history := time.Now().Add(-30 * time.Second) // traffic already served when the alerts fire
	healthy := startProfSim(t, vllmsim.Options{Model: phoneModel, Seed: 1, ProfilerLayers: 4,
		ProfilerFlushDelay: 300 * time.Millisecond, Start: history})
	slow := startProfSim(t, vllmsim.Options{Model: phoneModel, Scenario: vllmsim.ScenarioUnexplained, Seed: 2, ProfilerLayers: 4,
		ProfilerFlushDelay: 300 * time.Millisecond, Start: history})
	base := startDaemon(t, &daemonOpts{Playbooks: phonePlaybook,
		BasicAuth: "{username: " + pageUser + ", password: " + pagePass + "}"}).URL

	kept := phoneRun(t, base, "PhoneBaseline", healthy, "phone00000001")
	t.Logf("baseline run %s: %s %s", kept.ID, kept.Status, kept.Reason)
	run := phoneRun(t, base, "VLLMHighITL", slow, "phone00000002")
	verdict := "none"
	if run.Verdict != nil {
		verdict = run.Verdict.ID
	}
	t.Logf("alert run %s: %s, verdict %s", run.ID, run.Status, verdict)

	page := strings.Replace(base, "http://", "http://"+pageUser+":"+pagePass+"@", 1) + "/runs/" + url.PathEscape(run.ID)
	dir := artifactDir(t)
	for _, w := range []struct {
		name          string
		width, height int64
		mobile        bool
	}{{"desktop", 1280, 900, false}, {"phone", 390, 844, true}} {
		facts, png := readPage(t, chromium, page, w.width, w.height, w.mobile)
		shot := filepath.Join(dir, "runpage-"+w.name+".png")
		if err := os.WriteFile(shot, png, 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, format, err := image.DecodeConfig(bytes.NewReader(png))
		if err != nil || format != "png" || int64(cfg.Width) != w.width {
			t.Errorf("%s screenshot %s: %s %dx%d (%v), want a PNG %d px wide", w.name, shot, format, cfg.Width, cfg.Height, err, w.width)
		}
		t.Logf("%s (%d px): screenshot %s (%dx%d); headline %q", w.name, w.width, shot, cfg.Width, cfg.Height, facts.HeadlineText)

		if !facts.FirstInHeadline || len(facts.Above) > 0 {
			t.Errorf("%s: the first visible content is %q (elements above the headline: %v), want the headline", w.name, facts.FirstText, facts.Above)
		}
		if facts.HeadlineBot > facts.ViewportH {
			t.Errorf("%s: the headline ends at %.0f px, below the first screen (%.0f px)", w.name, facts.HeadlineBot, facts.ViewportH)
		}
		if !strings.HasPrefix(facts.HeadlineText, verdictWordsFor(run)) {
			t.Errorf("%s: headline %q, want it to lead with the verdict (%s)", w.name, facts.HeadlineText, verdict)
		}
		if w.mobile && facts.ScrollWidth > int(w.width) {
			t.Errorf("%s: the document is %d px wide at %d px (sideways scrolling); past the edge: %v", w.name, facts.ScrollWidth, w.width, facts.Overflowing)
		}
	}
	for _, s := range run.Steps {
		t.Logf("step %s/%s (%s): %s %s — %s", s.Plan, s.ID, s.Kind, s.Status, s.Reason, s.Summary)
	}
}

// phoneRun fires alertname on sim's instance and returns its run once it
// has finished and its manifest is written.
func phoneRun(t *testing.T, base, alertname string, sim *profSim, fingerprint string) runs.Run {
	t.Helper()
	body := fmt.Sprintf(`{"version":"4","groupKey":"{}:{}","status":"firing","receiver":"autocapture","alerts":[`+
		`{"status":"firing","labels":{"alertname":%q,"instance":%q,"model_name":%q,"profiler_dir":%q},`+
		`"annotations":{"summary":"p99 inter-token latency above 200ms on %s"},"startsAt":%q,"endsAt":"0001-01-01T00:00:00Z","fingerprint":%q}]}`,
		alertname, sim.Addr, phoneModel, sim.Dir, sim.Addr, time.Now().Add(-2*time.Second).UTC().Format(time.RFC3339Nano), fingerprint)
	if code, b := authed(t, "POST", base+"/hooks/alertmanager", []byte(body)); code != 200 {
		t.Fatalf("webhook %s: %d %s", alertname, code, b)
	}
	var run runs.Run
	waitFor(t, 3*time.Minute, "the "+alertname+" run to finish with its manifest", func() bool {
		var page runs.Page
		getAuthedJSON(t, base+"/api/v1/runs?alertname="+alertname, &page)
		if len(page.Runs) == 0 || page.Runs[0].FinishedAt == nil {
			return false
		}
		getAuthedJSON(t, base+"/api/v1/runs/"+page.Runs[0].ID, &run)
		return run.Manifest != ""
	})
	return run
}

// verdictWordsFor is how the headline starts for run: its verdict in words
// (the page's words for the ids this test can meet), else "No verdict".
func verdictWordsFor(run runs.Run) string {
	if run.Verdict == nil {
		return "No verdict"
	}
	switch run.Verdict.ID {
	case "kv-pressure":
		return "KV cache pressure"
	case "gpu-degraded":
		return "GPU degraded"
	case "client-aborts":
		return "client aborts"
	}
	return run.Verdict.ID
}

// readPage opens u in headless Chromium at width × height (a phone's
// viewport when mobile), and returns what the page says of its layout and
// a full-page PNG.
func readPage(t *testing.T, bin, u string, width, height int64, mobile bool) (pageFacts, []byte) {
	t.Helper()
	ctx := headlessChrome(t, bin, 90*time.Second, chromedp.Flag("hide-scrollbars", true))
	vp := []chromedp.EmulateViewportOption{chromedp.EmulateScale(1)}
	if mobile {
		vp = append(vp, chromedp.EmulateMobile, chromedp.EmulateTouch, chromedp.EmulatePortrait)
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(width, height, vp...), chromedp.Navigate(u),
		chromedp.WaitReady(chromedp.ID("steps"))); err != nil {
		t.Fatalf("chromium (DevTools) at %d px on the run page: %v", width, err)
	}
	facts, err := chromedp.Run(ctx, chromedp.Evaluate[pageFacts](pageFactsJS, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("chromium (DevTools) at %d px: the page's layout: %v", width, err)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("chromium (DevTools) at %d px: screenshot: %v", width, err)
	}
	return facts, png
}
