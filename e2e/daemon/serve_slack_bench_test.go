package daemon

import (
	"fmt"
	"net/http/httptest"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/slackstub"
)

// BenchmarkWebhookToSlackParent measures, against the real binary and the
// stand-in, the time from a webhook's 200 to its thread's parent in Slack:
// 50 alerts, one every AUTOCAPTURE_BENCH_GAP (default 1.2 s). Each run posts
// about three messages (parent, a step's reply, the end) into one channel
// paced at Slack's ~1 post/s, so below a gap of ~3 s the channel is the
// bottleneck: parents go ahead of queued replies (the pacer's order, and
// enough delivery workers that a new thread gets one). It reports p50 and p99.
//
//	go test ./e2e/daemon -run '^$' -bench WebhookToSlackParent -benchtime 1x
//	AUTOCAPTURE_BENCH_GAP=4s go test ./e2e/daemon -run '^$' -bench WebhookToSlackParent -benchtime 1x
func BenchmarkWebhookToSlackParent(b *testing.B) {
	stub := newSlack(b)
	target := &slowTarget{hits: map[string]int{}, slowHit: make(chan struct{}, 1)}
	srv := httptest.NewServer(target)
	defer srv.Close()
	d := startDaemon(b, &daemonOpts{Token: "bench", Playbooks: fastPlaybook(srv.URL), Notify: slackNotify(stub)})
	gap := 1200 * time.Millisecond
	if v, err := time.ParseDuration(os.Getenv("AUTOCAPTURE_BENCH_GAP")); err == nil {
		gap = v
	}
	for b.Loop() {
		const n = 50
		acked := map[string]time.Time{}
		for i := range n {
			code, body := d.post(b, webhookBody("E2EBench", fmt.Sprintf("bench%011d", time.Now().UnixNano()%1e11+int64(i)), "firing", time.Now()))
			if code != 200 {
				b.Fatalf("webhook %d: %s", code, body)
			}
			acked[runID(body)] = time.Now()
			time.Sleep(gap)
		}
		var lat []time.Duration
		deadline := time.Now().Add(180 * time.Second)
		for len(lat) < n && time.Now().Before(deadline) {
			lat = lat[:0]
			for _, m := range stub.Messages(slackChannel) {
				if m.Metadata == nil {
					continue
				}
				id, _ := m.Metadata.EventPayload["run_id"].(string)
				if at, ok := acked[id]; ok {
					lat = append(lat, m.Revisions[0].At.Sub(at))
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		if len(lat) < n {
			b.Fatalf("%d of %d parents posted", len(lat), n)
		}
		slices.Sort(lat)
		b.ReportMetric(float64(lat[n/2].Milliseconds()), "p50-ms")
		b.ReportMetric(float64(lat[n*99/100].Milliseconds()), "p99-ms")
	}
}

// fastPlaybook has one quick step against target.
func fastPlaybook(target string) string {
	return fmt.Sprintf(`playbooks:
  - name: bench
    match:
      - alertname="E2EBench"
    steps:
      - id: fast
        http: {url: "%s/fast"}
`, target)
}

// BenchmarkSlackThreadsThroughRateLimits measures, against the real binary and
// the stand-in, how long ten runs' threads take to arrive whole — from the
// first webhook to the last reply — twice: with Slack answering normally, and
// with 30% of every call answered 429 (Retry-After 1 s) for the first minute.
// Each run posts a parent, three step replies and the end into one channel
// paced at ~1 post/s. It fails if any reply is lost or doubled.
//
//	go test ./e2e/daemon -run '^$' -bench SlackThreadsThroughRateLimits -benchtime 1x
func BenchmarkSlackThreadsThroughRateLimits(b *testing.B) {
	for b.Loop() {
		clean, _ := threadsLanded(b, false)
		limited, n429 := threadsLanded(b, true)
		b.ReportMetric(clean.Seconds(), "clean-s")
		b.ReportMetric(limited.Seconds(), "with-429s-s")
		b.ReportMetric(float64(n429), "429s")
		b.Logf("10 threads × 5 messages, one channel: last reply %.1fs after the first webhook; with 30%% 429s for a minute %.1fs (%d calls answered 429), nothing lost or doubled",
			clean.Seconds(), limited.Seconds(), n429)
	}
}

// threadsLanded runs one round of BenchmarkSlackThreadsThroughRateLimits on a
// fresh daemon and stand-in and returns the time to the last reply and the
// number of calls answered 429.
func threadsLanded(b *testing.B, rateLimited bool) (time.Duration, int) {
	stub := newSlack(b)
	if rateLimited {
		stub.Fail("*", slackstub.RateLimited(1).Fraction(0.3, 11).For(time.Minute))
	}
	target := &slowTarget{hits: map[string]int{}, slowHit: make(chan struct{}, 1)}
	srv := httptest.NewServer(target)
	defer srv.Close()
	pb := fmt.Sprintf(`playbooks:
  - name: bench
    match:
      - alertname="E2EBench429"
    steps:
      - {id: one, http: {url: "%[1]s/one"}}
      - {id: two, http: {url: "%[1]s/two"}}
      - {id: three, tier: 2, http: {url: "%[1]s/three"}}
`, srv.URL)
	d := startDaemon(b, &daemonOpts{Token: "bench", Playbooks: pb, Notify: slackNotify(stub)})
	const n = 10
	want := []string{"step/bench/one", "step/bench/two", "step/bench/three", "close/finished"}
	sorted := slices.Sorted(slices.Values(want))
	start := time.Now()
	ids := map[string]bool{}
	for i := range n {
		code, body := d.post(b, webhookBody("E2EBench429", fmt.Sprintf("rl%013d", time.Now().UnixNano()%1e13+int64(i)), "firing", time.Now()))
		if code != 200 {
			b.Fatalf("webhook %d: %s", code, body)
		}
		ids[runID(body)] = true
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var last time.Time
		whole := 0
		for _, m := range stub.Messages(slackChannel) {
			id, _ := m.Metadata.EventPayload["run_id"].(string)
			if !ids[id] {
				continue
			}
			var keys []string
			for _, r := range m.Replies {
				if r.Metadata != nil {
					k, _ := r.Metadata.EventPayload["key"].(string)
					keys = append(keys, k)
				}
				if at := r.Revisions[0].At; at.After(last) {
					last = at
				}
			}
			// Files (charts) are not in this playbook: every reply is keyed.
			// Steps one and two run in parallel: their replies in either order.
			got := slices.Clone(keys)
			slices.Sort(got)
			if len(keys) == len(want) && keys[len(keys)-1] == "close/finished" && slices.Equal(got, sorted) {
				whole++
			} else if len(keys) > len(want) {
				b.Fatalf("run %s: thread %v, want %v: a reply doubled", id, keys, want)
			}
		}
		if whole == n {
			limited := 0
			for _, c := range stub.Calls() {
				if c.Outcome == slackstub.OutcomeRateLimited {
					limited++
				}
			}
			return last.Sub(start), limited
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d threads whole after 5 minutes\n%s", whole, n, stub.Dump())
		}
		time.Sleep(200 * time.Millisecond)
	}
}
