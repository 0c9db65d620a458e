package scrape

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vocab"
)

// scrapeInput is an Input for a scrape of srv, storing into a temporary folder.
func scrapeInput(t *testing.T, srv *httptest.Server) (*vocab.Input, *storage.Local) {
	t.Helper()
	store, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(srv.URL)
	return &vocab.Input{
		RunID: "run1", StepID: "scrape",
		Alert: template.Alert{Labels: template.KV{"alertname": "VLLMHighTTFT", "instance": u.Host}},
		Env:   &vocab.Env{Targets: srv.Client(), Store: store},
	}, store
}

// noWait replaces the gap's sleep so unit tests do not wait for real.
func noWait(context.Context, time.Duration) error { return nil }

func TestScrapeStoresBothScrapesAndReportsTheGap(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		i := n.Add(1)
		w.Write([]byte("# TYPE vllm:num_preemptions_total counter\n"))
		w.Write([]byte("vllm:num_preemptions_total{engine=\"0\"} " + map[int32]string{1: "10", 2: "30"}[i] + "\n"))
		w.Write([]byte("# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.5\n"))
		w.Write([]byte("# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 3\n"))
	}))
	defer srv.Close()
	in, store := scrapeInput(t, srv)
	clock := time.Unix(1.8e9, 0)
	in.Env.Now = func() time.Time { return clock }
	in.RunCreated = clock.Add(-2 * time.Second) // the run waited 2 s for a worker
	step, _ := New(Config{MinRequests: -1})     // the whole gap, every time
	var slept time.Duration
	step.sleep = func(_ context.Context, d time.Duration) error { slept = d; clock = clock.Add(d); return nil }
	res, err := step.Run(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if slept != 5*time.Second || res.Signals[vocab.SigPreemptionsRate] != 4 {
		t.Fatalf("default gap %v, preemptions %v/s; want 5s and 20 in 5 s = 4/s", slept, res.Signals[vocab.SigPreemptionsRate])
	}
	metrics := res.Findings["metrics"].(map[string]any)
	if _, ok := metrics["process_cpu_seconds_total"]; ok || metrics["vllm:kv_cache_usage_perc"] != 0.5 {
		t.Fatalf("findings keep vllm:* only: %v", metrics)
	}
	if len(res.Artifacts) != 2 || !strings.HasSuffix(res.Artifacts[0].Key, "/VLLMHighTTFT/run1/_~e3b0c442/scrape/scrape-1.txt") {
		t.Fatalf("artifacts %+v", res.Artifacts)
	}
	rc, err := store.Open(context.Background(), res.Artifacts[1].Key)
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()
	if !strings.Contains(res.Summary, "preemptions_per_s 4") || !strings.HasSuffix(res.Summary, "(seen 2.0–7.0 s after the alert arrived)") {
		t.Fatalf("summary %q, want the rates and how far the view is from the alert's arrival", res.Summary)
	}
	if res.Findings[FindingViewLagFirst] != 2.0 || res.Findings[FindingViewLag] != 7.0 {
		t.Errorf("view lag %v–%v s, want 2–7 s", res.Findings[FindingViewLagFirst], res.Findings[FindingViewLag])
	}
}

func TestScrapeFailuresSayWhy(t *testing.T) {
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()
	cases := []struct {
		name    string
		handler http.HandlerFunc // nil: nothing listens
		labels  template.KV
		noEnv   bool
		reason  vocab.Reason
		text    string
	}{
		{"nothing listens", nil, nil, false, vocab.ReasonUnreachable, "scrape http://"},
		{"server error", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "boom", 500) }, nil, false, vocab.ReasonUpstream5xx, "HTTP 500"},
		{"not an exposition", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("<html>hello</html>\n")) }, nil, false, vocab.ReasonBadConfig, "parse exposition"},
		{"alert without instance", func(http.ResponseWriter, *http.Request) {}, template.KV{"alertname": "x"}, false, vocab.ReasonBadConfig, "instance label"},
		{"instance with a path", func(http.ResponseWriter, *http.Request) {}, template.KV{"instance": "10.0.0.1:80/x"}, false, vocab.ReasonBadConfig, "want host:port"},
		{"no targets client", func(http.ResponseWriter, *http.Request) {}, nil, true, vocab.ReasonBadConfig, "no targets client"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(c.handler)
			defer srv.Close()
			in, _ := scrapeInput(t, srv)
			if c.handler == nil {
				u, _ := url.Parse(closedURL)
				in.Alert.Labels["instance"] = u.Host
			}
			if c.labels != nil {
				in.Alert.Labels = c.labels
			}
			if c.noEnv {
				in.Env.Targets = nil
			}
			step, _ := New(Config{})
			step.sleep = noWait
			_, err := step.Run(context.Background(), in)
			if vocab.Classify(err) != c.reason || !strings.Contains(err.Error(), c.text) {
				t.Fatalf("err = %v (%s), want %s containing %q", err, vocab.Classify(err), c.reason, c.text)
			}
		})
	}
}

func TestScrapeKeepsTheFirstWhenTheSecondFails(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if n.Add(1) > 1 {
			http.Error(w, "engine dead", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 42\n"))
	}))
	defer srv.Close()
	in, _ := scrapeInput(t, srv)
	step, _ := New(Config{})
	step.sleep = noWait
	res, err := step.Run(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if res.Signals[vocab.SigQueueDepth] != 42 || !strings.Contains(res.Findings["second_scrape_error"].(string), "HTTP 503") {
		t.Fatalf("signals %v findings %v", res.Signals, res.Findings)
	}
	if !strings.Contains(res.Summary, "one scrape") {
		t.Fatalf("summary %q", res.Summary)
	}
}

func TestScrapeHonoursItsDeadlineDuringTheGap(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 3\n"))
	}))
	defer srv.Close()
	in, _ := scrapeInput(t, srv)
	step, _ := New(Config{Gap: time.Minute})
	ctx, cancel := context.WithTimeoutCause(context.Background(), 50*time.Millisecond, errors.New("step scrape: 50ms deadline"))
	defer cancel()
	res, err := step.Run(ctx, in)
	if vocab.Classify(err) != vocab.ReasonTimeout || !strings.Contains(err.Error(), "stopped after the first scrape") {
		t.Fatalf("err = %v (%s)", err, vocab.Classify(err))
	}
	if res == nil || res.Signals[vocab.SigQueueDepth] != 3 || len(res.Artifacts) != 1 {
		t.Fatalf("the first scrape's evidence must be kept: %+v", res)
	}
}

func TestNewScrapeValidates(t *testing.T) {
	for name, cfg := range map[string]Config{
		"scheme":       {Scheme: "ftp"},
		"path":         {Path: "metrics"},
		"gap":          {Gap: -time.Second},
		"long gap":     {Gap: time.Hour},
		"target path":  {Target: "h:1/x"},
		"target alone": {Target: "host"},
		"glob":         {Match: []string{"["}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := New(cfg); vocab.Classify(err) != vocab.ReasonBadConfig {
				t.Fatalf("err = %v", err)
			}
		})
	}
}

// TestScrapeGapEndsOnceEnoughRequestsFinished: with 10 requests finishing per
// second and min_requests 20, the second scrape comes after 2 s of a 10 s gap.
func TestScrapeGapEndsOnceEnoughRequestsFinished(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := n.Add(1) - 1
		fmt.Fprintf(w, "# TYPE vllm:request_success_total counter\nvllm:request_success_total{finished_reason=\"stop\"} %d\n", 100+10*i)
	}))
	defer srv.Close()
	in, _ := scrapeInput(t, srv)
	clock := time.Unix(1.8e9, 0)
	in.Env.Now = func() time.Time { return clock }
	step, _ := New(Config{Gap: 10 * time.Second, MinRequests: 20})
	var waited time.Duration
	step.sleep = func(_ context.Context, d time.Duration) error { waited += d; clock = clock.Add(d); return nil }
	res, err := step.Run(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if waited != 2*time.Second || res.Findings["gap_s"] != 2.0 || n.Load() != 3 {
		t.Fatalf("waited %v, gap_s %v, %d scrapes; want 2s, 2, 3", waited, res.Findings["gap_s"], n.Load())
	}
}

// TestScrapeRefusalIsAFinding: a target the client refuses is reported in the
// result, not only in the error.
func TestScrapeRefusalIsAFinding(t *testing.T) {
	refusing := &http.Client{Transport: roundTripFunc(func(*http.Request) (*http.Response, error) {
		return nil, vocab.Errorf(vocab.ReasonRefused, "target 10.1.2.3:8000: not on the allow-list")
	})}
	step, _ := New(Config{})
	res, err := step.Run(context.Background(), &vocab.Input{RunID: "r", StepID: "scrape",
		Alert: template.Alert{Labels: template.KV{"instance": "10.1.2.3:8000"}}, Env: &vocab.Env{Targets: refusing}})
	if vocab.Classify(err) != vocab.ReasonRefused || res == nil {
		t.Fatalf("res %v, err %v", res, err)
	}
	if got, _ := res.Findings["refused"].(string); !strings.Contains(got, "not on the allow-list") {
		t.Fatalf("findings %v", res.Findings)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestScrapeGapIsNotStretchedBySlowFetches: the gap ends by the clock; polls
// whose fetches take time (here 0.5 s each) do not make a 10 s gap 15 s.
func TestScrapeGapIsNotStretchedBySlowFetches(t *testing.T) {
	var mu sync.Mutex
	clock := time.Unix(1.8e9, 0)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	advance := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		advance(500 * time.Millisecond) // a slow /metrics
		io.WriteString(w, "# TYPE vllm:request_success_total counter\nvllm:request_success_total{finished_reason=\"stop\"} 1\n")
	}))
	defer srv.Close()
	in, _ := scrapeInput(t, srv)
	in.Env.Now = now
	step, _ := New(Config{Gap: 10 * time.Second, MinRequests: 1000}) // never reached: polls to the end
	step.sleep = func(_ context.Context, d time.Duration) error { advance(d); return nil }
	res, err := step.Run(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if gap := res.Findings["gap_s"].(float64); gap < 10 || gap > 11 {
		t.Fatalf("gap %.1fs, want 10 s plus at most one fetch", gap)
	}
}
