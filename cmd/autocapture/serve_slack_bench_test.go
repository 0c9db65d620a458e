package main

import (
	"fmt"
	"net/http/httptest"
	"os"
	"slices"
	"testing"
	"time"
)

// BenchmarkWebhookToSlackParent measures, against the real binary and the
// stand-in, the time from a webhook's 200 to its thread's parent in Slack:
// 20 alerts, one every AUTOCAPTURE_BENCH_GAP (default 1.2 s). Each run posts
// about three messages (parent, a step's reply, the end) into one channel
// paced at Slack's ~1 post/s, so below a gap of ~3 s the channel is the
// bottleneck: parents go ahead of queued replies (the pacer's order, and
// enough delivery workers that a new thread gets one). It reports p50 and p99.
//
//	go test ./cmd/autocapture -run '^$' -bench WebhookToSlackParent -benchtime 1x
//	AUTOCAPTURE_BENCH_GAP=4s go test ./cmd/autocapture -run '^$' -bench WebhookToSlackParent -benchtime 1x
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
		const n = 20
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
		deadline := time.Now().Add(120 * time.Second)
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
