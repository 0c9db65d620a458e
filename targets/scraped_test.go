package targets

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestFromPrometheusAllowsScrapedInstances runs a real Prometheus that scrapes
// one target; with an empty static list, only that instance is reachable.
func TestFromPrometheusAllowsScrapedInstances(t *testing.T) {
	scraped := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 3")
	}))
	defer scraped.Close()
	unscraped, accepts := countingServer(t, "127.0.0.1:0")
	inst := strings.TrimPrefix(scraped.URL, "http://")
	prom := testenv.StartPrometheus(t, testenv.PrometheusOptions{ScrapeTargets: []string{inst}})
	prom.WaitUp(t, inst, 30*time.Second)

	p, err := New(config.Targets{FromPrometheus: true}, Options{PrometheusURL: prom.URL, LookupIP: fakeDNS(t, nil)})
	if err != nil {
		t.Fatal(err)
	}
	c := p.Client(5 * time.Second)
	if code, err := get(context.Background(), c, scraped.URL+"/metrics"); err != nil || code != 200 {
		t.Fatalf("GET scraped instance = %d, %v; want 200", code, err)
	}
	_, err = get(context.Background(), c, unscraped.URL)
	assertRefused(t, err, strings.TrimPrefix(unscraped.URL, "http://"), "not on the allow-list")
	if accepts.Load() != 0 {
		t.Fatalf("the unscraped instance accepted %d connections", accepts.Load())
	}
}

// TestScrapedListCachesAndSurvivesOutages uses a fake Prometheus (the real one
// cannot be made to fail on cue) and a fake clock.
func TestScrapedListCachesAndSurvivesOutages(t *testing.T) {
	var queries atomic.Int64
	var down atomic.Bool
	prom := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		queries.Add(1)
		if down.Load() {
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, `{"status":"success","data":{"resultType":"vector","result":[`+
			`{"metric":{"instance":"vllm-0.test:8000"},"value":[1,"1"]},`+
			`{"metric":{"instance":"10.0.0.7:8000"},"value":[1,"0"]},`+
			`{"metric":{"instance":"node1.test"},"value":[1,"1"]},`+
			`{"metric":{"instance":"10.0.0.8"},"value":[1,"1"]}]}}`)
	}))
	defer prom.Close()
	now := time.Unix(1_800_000_000, 0)
	p, err := New(config.Targets{FromPrometheus: true}, Options{
		PrometheusURL: prom.URL, ScrapedTTL: time.Minute, Now: func() time.Time { return now },
		LookupIP: fakeDNS(t, map[string][]string{"vllm-0.test": {"10.0.0.9"}, "node1.test": {"10.0.0.11"}}),
	})
	if err != nil {
		t.Fatal(err)
	}
	check := func(step, rawURL string, allowed bool) {
		t.Helper()
		u, _ := urlParse(rawURL)
		err := p.CheckURL(context.Background(), u)
		if allowed && err != nil {
			t.Fatalf("%s: %s refused: %v", step, rawURL, err)
		}
		if !allowed {
			assertRefused(t, err)
		}
	}
	check("fresh", "http://vllm-0.test:8000/version", true)
	check("fresh", "http://10.0.0.7:8000/version", true)
	check("fresh", "http://10.0.0.7:9000/version", false)
	// A scraped instance without a port allows no port at all (not every port).
	check("port-less", "http://node1.test:22/", false)
	check("port-less", "http://10.0.0.8:6443/", false)
	check("cached", "http://10.0.0.7:8000/", true)
	if q := queries.Load(); q != 1 {
		t.Fatalf("Prometheus queried %d times within one TTL, want 1", q)
	}
	down.Store(true)
	now = now.Add(2 * time.Minute)
	check("stale but kept", "http://10.0.0.7:8000/", true)
	now = now.Add(20 * time.Minute)
	u, _ := urlParse("http://10.0.0.7:8000/")
	err = p.CheckURL(context.Background(), u)
	assertRefused(t, err, "scraped-instance list is unavailable", "503")
}

func urlParse(s string) (*url.URL, error) { return url.Parse(s) }
