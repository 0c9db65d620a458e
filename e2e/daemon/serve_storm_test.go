package daemon

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// stormBody is one webhook (one Alertmanager group) of n firing alerts.
func stormBody(alertname string, n int, startsAt time.Time) []byte {
	var alerts []string
	for i := range n {
		alerts = append(alerts, fmt.Sprintf(`{"status":"firing","labels":{"alertname":%q,"instance":"10.0.0.%d:8000","model_name":"m"},`+
			`"annotations":{},"startsAt":%q,"endsAt":"0001-01-01T00:00:00Z","fingerprint":"storm%011d"}`,
			alertname, i, startsAt.UTC().Format(time.RFC3339Nano), i))
	}
	return []byte(`{"version":"4","groupKey":"{}:{}","status":"firing","receiver":"autocapture","alerts":[` +
		strings.Join(alerts, ",") + `]}`)
}

// TestServeSlackStorm: the real binary, one webhook of 15 new alerts (over
// the default notify.storm.threshold of 10), Slack at its default pace: one
// parent listing all 15, one compact reply per run, no reply per step.
func TestServeSlackStorm(t *testing.T) {
	t.Parallel()
	stub := newSlack(t)
	target := &slowTarget{hits: map[string]int{}, slowHit: make(chan struct{}, 1)}
	srv := httptest.NewServer(target)
	defer srv.Close()
	pb := strings.ReplaceAll(fastPlaybook(srv.URL), "E2EBench", "E2EStorm")
	d := startDaemon(t, &daemonOpts{Token: "storm", Playbooks: pb, Notify: slackNotify(stub)})
	const n = 15
	start := time.Now()
	code, b := d.post(t, stormBody("E2EStorm", n, time.Now().Add(-time.Minute)))
	if code != 200 {
		t.Fatalf("webhook: %d %s", code, b)
	}
	members := func() int {
		c := 0
		for _, m := range stub.Messages(slackChannel) {
			for _, k := range replyKeys(m) {
				if strings.HasPrefix(k, "member/") {
					c++
				}
			}
		}
		return c
	}
	waitFor(t, 120*time.Second, "15 member replies", func() bool { return members() == n })
	t.Logf("%d-alert storm through the binary: %s from the webhook to the last member reply (default pace)", n,
		time.Since(start).Round(100*time.Millisecond))
	ms := stub.Messages(slackChannel)
	if len(ms) != 1 {
		t.Fatalf("%d parents, want one for the storm\n%s", len(ms), stub.Dump())
	}
	keys := replyKeys(ms[0])
	if len(keys) != n {
		t.Errorf("thread %v: want the %d members' replies only", keys, n)
	}
	waitFor(t, 30*time.Second, "the table to show every run's end", func() bool {
		return strings.Contains(stub.Messages(slackChannel)[0].Text, fmt.Sprintf("Alert storm: %d alerts (E2EStorm): %d succeeded", n, n))
	})
	raw := string(stub.Messages(slackChannel)[0].Blocks)
	for i := range n {
		if !strings.Contains(raw, fmt.Sprintf("10.0.0.%d:8000", i)) {
			t.Errorf("the storm's parent does not list instance %d", i)
		}
	}
}
