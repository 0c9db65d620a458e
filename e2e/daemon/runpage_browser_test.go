package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	_ "image/png" // decode the chart and the screenshot
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/htmldoc"

	"github.com/chromedp/chromedp"
	"golang.org/x/net/html"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/runner/runs"
)

// The run page in a real browser: the daemon binary on a real Prometheus
// makes one run whose chart step stores a PNG; headless Chromium (Debian's
// chromium, installed by scripts/install-tools.sh; a missing one fails the
// test, as every missing component does) loads /runs/{id} and /runs: its
// --dump-dom and --screenshot, and over the DevTools protocol (chromedp) each
// chart's naturalWidth once the images have loaded.
//
// Auth: the daemon guards the API with basic auth, and the browser is given
// the credentials in the URL (http://user:pass@host/runs/id), which Chromium
// answers the 401's Basic challenge with; no cookie is involved. The page's
// images and artifact links carry link tokens (the artifact route's sig and
// exp), so they load without credentials — checked here by fetching each
// with none, exactly as the DOM Chromium rendered names them.

const (
	pageUser = "ops"
	pagePass = "pa55-word"
	// pageHostile is a label value an alert source controls.
	pageHostile = `"><script>document.title='owned'</script><img src=x onerror=alert(1)>`
)

func TestRunPageInBrowser(t *testing.T) {
	t.Parallel()
	chromium := testenv.Tool(t, "chromium")

	var scrapes atomic.Int64
	target := startMetricsTarget(t, &scrapes)
	inst := strings.TrimPrefix(target, "http://")
	prom := testenv.StartPrometheus(t, testenv.PrometheusOptions{ScrapeTargets: []string{inst}})
	prom.WaitUp(t, inst, 30*time.Second)
	waitFor(t, 30*time.Second, "six scrapes of the target", func() bool { return scrapes.Load() >= 6 })

	// The API behind the operator's basic auth, Prometheus the one started above.
	base := startDaemon(t, &daemonOpts{Playbooks: fmt.Sprintf(runPagePlaybook, inst, inst),
		BasicAuth:  "{username: " + pageUser + ", password: " + pagePass + "}",
		Prometheus: "  url: " + prom.URL + "\n"}).URL

	body := fmt.Sprintf(`{"version":"4","groupKey":"{}:{}","status":"firing","receiver":"autocapture","alerts":[`+
		`{"status":"firing","labels":{"alertname":"RunPageAlert","instance":%q,"team":%q},"annotations":{"summary":"queue \"deep\" & <b>growing</b>"},`+
		`"startsAt":%q,"endsAt":"0001-01-01T00:00:00Z","fingerprint":"runpage01"}]}`,
		inst, pageHostile, time.Now().Add(-5*time.Second).UTC().Format(time.RFC3339Nano))
	code, b := authed(t, "POST", base+"/hooks/alertmanager", []byte(body))
	if code != 200 {
		t.Fatalf("webhook: %d %s", code, b)
	}
	var run runs.Run
	waitFor(t, 90*time.Second, "the run to finish and its manifest", func() bool {
		var page runs.Page
		getAuthedJSON(t, base+"/api/v1/runs?alertname=RunPageAlert", &page)
		if len(page.Runs) == 0 || page.Runs[0].FinishedAt == nil {
			return false
		}
		getAuthedJSON(t, base+"/api/v1/runs/"+page.Runs[0].ID, &run)
		return run.Manifest != "" // written shortly after the run finished
	})
	if run.Verdict == nil {
		t.Fatalf("run %s finished %s without a verdict: %+v", run.ID, run.Status, run.Steps)
	}
	var charts int
	for _, s := range run.Steps {
		if s.Kind == "chart" && s.Status == "succeeded" {
			charts++
		}
	}
	if charts != 2 {
		t.Fatalf("%d charts succeeded, want 2: %+v", charts, run.Steps)
	}

	pageURL := base + "/runs/" + url.PathEscape(run.ID)
	withCreds := strings.Replace(pageURL, "http://", "http://"+pageUser+":"+pagePass+"@", 1)
	if code, _ := fetchAnon(t, pageURL); code != http.StatusUnauthorized {
		t.Fatalf("the page without credentials: %d, want 401", code)
	}

	dom := runChromium(t, chromium, "--dump-dom", withCreds)
	doc, err := html.Parse(strings.NewReader(dom))
	if err != nil {
		t.Fatal(err)
	}
	all := htmldoc.Text(doc)
	for _, want := range []string{run.Verdict.ID, "Verdict history", "Steps", "vllm/snapshot", "vllm/queue_chart", "vllm/kv_chart", "vllm/triage", pageHostile, `queue "deep" & <b>growing</b>`} {
		if !strings.Contains(all, want) {
			t.Errorf("the rendered page lacks %q", want)
		}
	}
	if len(run.Verdict.Evidence) > 0 && !strings.Contains(all, run.Verdict.Evidence[0]) {
		t.Errorf("the rendered page lacks the verdict's evidence %q", run.Verdict.Evidence[0])
	}
	var imgs, hrefs []string
	htmldoc.Walk(doc, func(n *html.Node) {
		if n.Type != html.ElementNode {
			return
		}
		switch {
		case n.Data == "script":
			t.Errorf("a script element in the rendered page: %s", htmldoc.Text(n))
		case n.Data == "img":
			if htmldoc.Attr(n, "onerror") != "" || htmldoc.Attr(n, "src") == "x" {
				t.Errorf("an injected image: %v", n.Attr)
			}
			imgs = append(imgs, htmldoc.Attr(n, "src"))
		case n.Data == "a" && htmldoc.Attr(n, "class") == "artifact":
			hrefs = append(hrefs, htmldoc.Attr(n, "href"))
		}
	})
	if strings.Contains(dom, "<title>owned") {
		t.Errorf("the hostile label's script ran")
	}
	if len(imgs) != charts {
		t.Fatalf("%d images on the page, want the %d charts", len(imgs), charts)
	}
	for _, src := range imgs {
		u := htmldoc.Resolve(t, pageURL, src)
		code, b := fetchAnon(t, u)
		cfg, format, err := image.DecodeConfig(bytes.NewReader(b))
		if code != 200 || err != nil || format != "png" || cfg.Width < 100 || cfg.Height < 100 {
			t.Errorf("chart %s: %d, %s %dx%d (%v)", u, code, format, cfg.Width, cfg.Height, err)
		}
	}
	wantLinks := 1 // the manifest
	for _, s := range run.Steps {
		wantLinks += len(s.Artifacts)
	}
	if len(hrefs) != wantLinks {
		t.Errorf("%d artifact links, want %d", len(hrefs), wantLinks)
	}
	for _, h := range hrefs {
		if code, b := fetchAnon(t, htmldoc.Resolve(t, pageURL, h)); code != 200 {
			t.Errorf("artifact link %s: %d %s", h, code, b)
		}
	}

	// In the browser itself (DevTools protocol): every image decoded
	// (naturalWidth > 0, complete), so the charts are what a reader sees.
	widths := chromeImageWidths(t, chromium, withCreds)
	if len(widths) != charts {
		t.Fatalf("the browser saw %d images, want %d", len(widths), charts)
	}
	for src, w := range widths {
		if w <= 0 {
			t.Errorf("the browser did not load the chart %s (naturalWidth %d)", src, w)
		}
	}

	shot := filepath.Join(artifactDir(t), "runpage.png")
	runChromium(t, chromium, "--screenshot="+shot, "--window-size=1280,2000", withCreds)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	sc, _, err := image.DecodeConfig(f)
	if err != nil || sc.Width != 1280 || sc.Height != 2000 {
		t.Fatalf("screenshot %s: %dx%d (%v)", shot, sc.Width, sc.Height, err)
	}
	t.Logf("run page screenshot: %s", shot)

	list := runChromium(t, chromium, "--dump-dom", strings.Replace(base, "http://", "http://"+pageUser+":"+pagePass+"@", 1)+"/runs?alertname=RunPageAlert")
	ldoc, err := html.Parse(strings.NewReader(list))
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	htmldoc.Walk(ldoc, func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "a" && strings.HasPrefix(htmldoc.Attr(n, "href"), "runs/") {
			rows = append(rows, htmldoc.Attr(n, "href"))
		}
	})
	if len(rows) != 1 || htmldoc.Resolve(t, base+"/runs", rows[0]) != pageURL {
		t.Fatalf("the list links %v, want the run's page %s", rows, pageURL)
	}
}

// runPagePlaybook: the PromQL snapshot, two charts, triage.
const runPagePlaybook = `playbooks:
  - name: vllm
    match:
      - alertname="RunPageAlert"
    steps:
      - id: snapshot
        prometheus:
          queries:
            - name: queue
              signal: queue_depth
              query: 'max_over_time(sum(vllm:num_requests_waiting{instance="%s"})[2m:])'
            - name: kv
              signal: kv_usage
              query: 'max(max_over_time(vllm:kv_cache_usage_perc{instance="%[1]s"}[2m]))'
      - id: queue_chart
        chart:
          title: queue depth
          unit: requests
          query: 'vllm:num_requests_waiting{instance="%[1]s"}'
      - id: kv_chart
        chart:
          title: KV cache usage
          unit: ratio
          threshold: 0.95
          query: 'vllm:kv_cache_usage_perc{instance="%[2]s"}'
      - id: triage
        triage:
          from: [snapshot]
`

// startMetricsTarget serves a vLLM-like /metrics whose queue climbs by one
// per scrape and whose KV cache is nearly full.
func startMetricsTarget(t *testing.T, scrapes *atomic.Int64) string {
	t.Helper()
	port := testenv.FreePort(t)
	srv := &http.Server{Addr: fmt.Sprintf("127.0.0.1:%d", port), ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := scrapes.Add(1)
			fmt.Fprintf(w, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} %d\n"+
				"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name=\"m\"} 0.98\n", n)
		})}
	go srv.ListenAndServe()
	t.Cleanup(func() { srv.Close() })
	return fmt.Sprintf("http://127.0.0.1:%d", port)
}

// runChromium runs headless Chromium once on u and returns its stdout.
func runChromium(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	argv := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--user-data-dir=" + t.TempDir()}, args...)
	cmd := exec.CommandContext(ctx, bin, argv...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// chromeImageWidths opens u in headless Chromium over the DevTools protocol,
// waits for the load event and returns each image's src and naturalWidth
// (0: not loaded or not decodable).
func chromeImageWidths(t *testing.T, bin, u string) map[string]int {
	t.Helper()
	ctx := headlessChrome(t, bin, 90*time.Second)
	type img struct {
		Src      string `json:"src"`
		Width    int    `json:"w"`
		Complete bool   `json:"complete"`
	}
	// Wait for every image to load or fail, then read what it decoded to.
	js := `Promise.all(Array.from(document.images).map(i => i.complete ? null :
		new Promise(r => { i.addEventListener("load", r); i.addEventListener("error", r); }))).then(() =>
		Array.from(document.images).map(i => ({src: i.getAttribute("src"), w: i.naturalWidth, complete: i.complete})))`
	if err := chromedp.Do(ctx, chromedp.Navigate(u), chromedp.WaitReady(chromedp.ID("steps"))); err != nil {
		t.Fatalf("chromium (DevTools) on the run page: %v", err)
	}
	imgs, err := chromedp.Run(ctx, chromedp.Evaluate[[]img](js, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("chromium (DevTools): the page's images: %v", err)
	}
	out := map[string]int{}
	for _, i := range imgs {
		out[i.Src] = i.Width
	}
	return out
}

// artifactDir is where a test keeps files for people to look at:
// $AUTOCAPTURE_TEST_ARTIFACTS when set (CI uploads it), else a temp dir.
func artifactDir(t *testing.T) string {
	t.Helper()
	d := os.Getenv("AUTOCAPTURE_TEST_ARTIFACTS")
	if d == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

func authed(t *testing.T, method, u string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(pageUser, pagePass)
	if len(body) > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	return doRaw(t, req)
}

func getAuthedJSON(t *testing.T, u string, v any) {
	t.Helper()
	code, b := authed(t, "GET", u, nil)
	if code != 200 {
		t.Fatalf("GET %s: %d %s", u, code, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
}

// fetchAnon gets u with no credentials at all.
func fetchAnon(t *testing.T, u string) (int, []byte) {
	t.Helper()
	res, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

// headlessChrome starts the Chromium at bin, headless, in its own profile,
// with nothing it would fetch on its own (no QUIC, updates, sync or
// background requests: only loopback traffic), and returns a tab's context
// bounded by timeout (a bound on a hang, not a speed check). The browser
// ends with the test. extra adds options (a window size, hidden scrollbars).
func headlessChrome(t *testing.T, bin string, timeout time.Duration, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	opts := append([]chromedp.ExecAllocatorOption{chromedp.ExecPath(bin), chromedp.Headless, chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true)}, extra...)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancelTime := context.WithTimeout(ctx, timeout)
	t.Cleanup(func() { cancelTime(); cancelTab(); cancelAlloc() })
	return ctx
}
