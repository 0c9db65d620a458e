package daemon

import (
	"bytes"
	"fmt"
	"image"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
)

// listCell is one cell of the run list's first row as laid out.
type listCell struct {
	Text  string  `json:"text"`
	Right float64 `json:"right"`
	Width float64 `json:"width"`
}

// listFacts is what the browser says of the run list.
type listFacts struct {
	Viewport    float64    `json:"viewport"`
	ScrollWidth float64    `json:"scrollWidth"`
	Cells       []listCell `json:"cells"`
}

const listFactsJS = `(() => {
  const vw = document.documentElement.clientWidth;
  const cells = Array.from(document.querySelectorAll("#runs tbody tr:first-child td")).map(td => {
    const r = td.getBoundingClientRect();
    return {text: td.innerText.trim(), right: r.right, width: r.width};
  });
  return {viewport: vw, scrollWidth: document.documentElement.scrollWidth, cells};
})()`

// TestRunListPhoneInBrowser: the run list read on a phone (390 px) and at a
// desk (1280 px) in headless Chromium: every column of a run (id, alert,
// instance, status, created, took) is on the screen, not past its right
// edge in a box that scrolls sideways, and the page itself does not scroll
// sideways. A full-page PNG per width is kept as the run page's test keeps
// its own.
func TestRunListPhoneInBrowser(t *testing.T) {
	t.Parallel()
	chromium := testenv.Tool(t, "chromium")
	d := startDaemon(t, &daemonOpts{BasicAuth: "{username: " + pageUser + ", password: " + pagePass + "}"})
	for i := range 3 {
		body := webhookBody("VLLMHighTTFTOnAPhone", fmt.Sprintf("ph0ne1ist%07d", i), "firing", time.Now().Add(-time.Minute))
		if code, b := authed(t, "POST", d.URL+"/hooks/alertmanager", body); code != 200 {
			t.Fatalf("webhook: %d %s", code, b)
		}
	}
	page := strings.Replace(d.URL, "http://", "http://"+pageUser+":"+pagePass+"@", 1) + "/runs"
	dir := artifactDir(t)
	for _, w := range []struct {
		name          string
		width, height int64
		mobile        bool
	}{{"desktop", 1280, 900, false}, {"phone", 390, 844, true}} {
		ctx := headlessChrome(t, chromium, 60*time.Second, chromedp.Flag("hide-scrollbars", true))
		vp := []chromedp.EmulateViewportOption{chromedp.EmulateScale(1)}
		if w.mobile {
			vp = append(vp, chromedp.EmulateMobile, chromedp.EmulateTouch, chromedp.EmulatePortrait)
		}
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(w.width, w.height, vp...), chromedp.Navigate(page),
			chromedp.WaitReady(chromedp.ID("runs"))); err != nil {
			t.Fatalf("chromium (DevTools) at %d px on the run list: %v", w.width, err)
		}
		facts, err := chromedp.Run(ctx, chromedp.Evaluate[listFacts](listFactsJS))
		if err != nil {
			t.Fatalf("chromium (DevTools) at %d px: the list's layout: %v", w.width, err)
		}
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("chromium (DevTools) at %d px: screenshot: %v", w.width, err)
		}
		shot := filepath.Join(dir, "runlist-"+w.name+".png")
		if err := os.WriteFile(shot, png, 0o644); err != nil {
			t.Fatal(err)
		}
		if cfg, format, err := image.DecodeConfig(bytes.NewReader(png)); err != nil || format != "png" || int64(cfg.Width) != w.width {
			t.Errorf("%s screenshot %s: %s %dx%d (%v), want a PNG %d px wide", w.name, shot, format, cfg.Width, cfg.Height, err, w.width)
		}
		t.Logf("%s (%d px): screenshot %s; first row %+v", w.name, w.width, shot, facts.Cells)
		if len(facts.Cells) < 6 {
			t.Fatalf("%s: first row has %d cells, want the run's columns", w.name, len(facts.Cells))
		}
		for _, c := range facts.Cells {
			if c.Text == "" {
				continue
			}
			if c.Width <= 0 || c.Right > facts.Viewport+0.5 {
				t.Errorf("%s: cell %q ends at %.0f px, past the %0.f px screen (only a sideways scroll shows it)", w.name, c.Text, c.Right, facts.Viewport)
			}
		}
		if facts.ScrollWidth > float64(w.width) {
			t.Errorf("%s: the document is %.0f px wide at %d px (sideways scrolling)", w.name, facts.ScrollWidth, w.width)
		}
	}
}
