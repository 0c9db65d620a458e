package daemon

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/runner/runs"
)

// amConfig routes everything to the daemon through n webhook_configs, with the
// daemon's token, grouping fast.
func amConfig(d *daemon, n int) string { return amConfigFor("", slices.Repeat([]*daemon{d}, n)...) }

// amConfigFor routes everything to each of ds (a webhook_config each, with
// its token), grouping fast; groupBy is the route's group_by list ("" for
// none: one group).
func amConfigFor(groupBy string, ds ...*daemon) string {
	var b strings.Builder
	b.WriteString("route:\n  receiver: autocapture\n  group_wait: 1s\n  group_interval: 1s\n  repeat_interval: 1h\n")
	if groupBy != "" {
		fmt.Fprintf(&b, "  group_by: %s\n", groupBy)
	}
	b.WriteString("receivers:\n  - name: autocapture\n    webhook_configs:\n")
	for _, d := range ds {
		fmt.Fprintf(&b, "      - url: %s/hooks/alertmanager\n        send_resolved: true\n", d.URL)
		fmt.Fprintf(&b, "        http_config:\n          authorization:\n            credentials: %s\n", d.Token)
	}
	return b.String()
}

// TestServeAlertmanagerFiringThenResolved: a real Alertmanager 0.25 routes an
// alert to the daemon; the run appears via the API; the resolved notification
// sets resolved_at.
func TestServeAlertmanagerFiringThenResolved(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, &daemonOpts{Token: "am-e2e"})
	am := testenv.StartAlertmanager(t, amConfig(d, 1))
	labels := map[string]string{"alertname": "E2EFiring", "instance": "127.0.0.1:8000"}
	start := time.Now().Add(-time.Minute)
	am.PostAlerts(t, testenv.PostableAlert{Labels: labels, StartsAt: start})

	var listed []runs.Run
	waitFor(t, 30*time.Second, "the run of E2EFiring", func() bool {
		listed = d.runs(t, "E2EFiring")
		return len(listed) > 0
	})
	if len(listed) != 1 || listed[0].ResolvedAt != nil {
		t.Fatalf("after firing: runs %+v, want one unresolved", listed)
	}
	id := listed[0].ID

	am.PostAlerts(t, testenv.PostableAlert{Labels: labels, StartsAt: start, EndsAt: time.Now().Add(-time.Second)})
	waitFor(t, 30*time.Second, "resolved_at on the run", func() bool {
		return d.run(t, id).ResolvedAt != nil
	})
	if runs := d.runs(t, "E2EFiring"); len(runs) != 1 {
		t.Errorf("after resolving: %d runs, want 1", len(runs))
	}
	if v := d.metric(t, `autocapture_alerts_total{outcome="resolved"}`); v != 1 {
		t.Errorf("alerts resolved = %v, want 1", v)
	}
	if v := d.metric(t, `autocapture_webhooks_total{code="200"}`); v < 2 {
		t.Errorf("webhooks 200 = %v, want at least 2", v)
	}
	// The build the daemon runs, as every Prometheus-ecosystem binary says it:
	// a plain go build has no linker flags, so the version and revision come
	// from the toolchain's build info (never empty).
	buildInfo := regexp.MustCompile(`(?m)^autocapture_build_info\{branch="unknown",goarch="` + runtime.GOARCH + `",goos="` + runtime.GOOS +
		`",goversion="` + regexp.QuoteMeta(runtime.Version()) + `",revision="[^"]+",tags="[^"]*",version="[^"]+"\} 1$`)
	req, _ := http.NewRequest("GET", d.URL+"/metrics", nil)
	if _, b := d.do(t, req); !buildInfo.Match(b) {
		t.Errorf("/metrics has no line matching %s", buildInfo)
	}
}

// TestServeOneRunPerFiring: three webhook_configs → one run; 100 concurrent
// identical POSTs → one run; a later startsAt for the same unresolved
// fingerprint → the same run.
func TestServeOneRunPerFiring(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, &daemonOpts{Token: "dedup"})
	am := testenv.StartAlertmanager(t, amConfig(d, 3))
	am.PostAlerts(t, testenv.PostableAlert{Labels: map[string]string{"alertname": "E2EThree", "instance": "127.0.0.1:8001"},
		StartsAt: time.Now().Add(-time.Minute)})
	waitFor(t, 30*time.Second, "three deliveries", func() bool {
		return d.metric(t, `autocapture_webhooks_total{code="200"}`) >= 3
	})
	if runs := d.runs(t, "E2EThree"); len(runs) != 1 {
		t.Fatalf("three webhook_configs made %d runs, want 1", len(runs))
	}

	start := time.Now().Add(-time.Minute)
	body := webhookBody("E2EConcurrent", "c0ffee00c0ffee00", "firing", start)
	ids := make(chan string, 100)
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() {
			req, _ := http.NewRequest("POST", d.URL+"/hooks/alertmanager", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+d.Token)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("concurrent POST: %v", err)
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 {
				t.Errorf("concurrent POST: %d %s", resp.StatusCode, b)
				return
			}
			ids <- runID(b)
		})
	}
	wg.Wait()
	close(ids)
	seen := map[string]int{}
	for id := range ids {
		seen[id]++
	}
	runs := d.runs(t, "E2EConcurrent")
	if len(runs) != 1 || len(seen) != 1 || seen[runs[0].ID] != 100 {
		t.Fatalf("100 identical POSTs: runs %d, run ids answered %v", len(runs), seen)
	}

	code, b := d.post(t, webhookBody("E2EConcurrent", "c0ffee00c0ffee00", "firing", start.Add(30*time.Second)))
	if code != 200 || runID(b) != runs[0].ID || !bytes.Contains(b, []byte(`"outcome":"deduplicated"`)) {
		t.Fatalf("later startsAt while unresolved: %d %s, want run %s deduplicated", code, b, runs[0].ID)
	}
}

// runID returns the run id of the first alert of a webhook answer.
func runID(b []byte) string {
	_, rest, ok := bytes.Cut(b, []byte(`"run_id":"`))
	if !ok {
		return ""
	}
	id, _, _ := bytes.Cut(rest, []byte(`"`))
	return string(id)
}

// slowTarget is an HTTP target for the playbook's steps: /fast answers at once,
// /slow after a few seconds; it counts the requests of each.
type slowTarget struct {
	mu      sync.Mutex
	hits    map[string]int
	slowHit chan struct{}
}

func (s *slowTarget) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.hits[r.URL.Path]++
	s.mu.Unlock()
	if r.URL.Path == "/slow" {
		select {
		case s.slowHit <- struct{}{}:
		default:
		}
		select {
		case <-time.After(3 * time.Second):
		case <-r.Context().Done():
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"path":%q}`, r.URL.Path)
}

func (s *slowTarget) count(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits[path]
}
