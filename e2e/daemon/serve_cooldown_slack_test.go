package daemon

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/vocab"
)

// cooldownPlaybook has a step that succeeds and one that fails (the run
// ends partial), with a cooldown per instance.
func cooldownPlaybook(target string) string {
	return fmt.Sprintf(`playbooks:
  - name: e2e-cooldown
    match:
      - alertname="E2ECooldown"
    cooldown: 10m
    cooldown_by: [instance]
    steps:
      - id: ok
        http: {url: "%[1]s/ok"}
      - id: broken
        continue_on_error: true
        http: {url: "%[1]s/broken"}
`, target)
}

// modelAlert is a version-4 body with one alert naming its model and
// instance, as a vLLM alert does.
func modelAlert(fingerprint string, startsAt time.Time) []byte {
	return []byte(fmt.Sprintf(`{"version":"4","groupKey":"{}:{}","status":"firing","receiver":"autocapture","alerts":[`+
		`{"status":"firing","labels":{"alertname":"E2ECooldown","instance":"127.0.0.1:8000","model_name":"m"},`+
		`"annotations":{},"startsAt":%q,"endsAt":"0001-01-01T00:00:00Z","fingerprint":%q}]}`,
		startsAt.UTC().Format(time.RFC3339Nano), fingerprint))
}

// TestServeCooldownRepeatReachesSlack: the holder run finished partial, its
// thread ended; the same alert fires again seconds later and is skipped
// inside the cooldown. The repeat's reply must arrive in the holder's thread
// on Slack, not only sit in the outbox.
func TestServeCooldownRepeatReachesSlack(t *testing.T) {
	t.Parallel()
	stub := newSlack(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/broken" {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		fmt.Fprintln(w, "ok")
	}))
	defer srv.Close()
	d := startDaemon(t, &daemonOpts{Token: "cooldown", Playbooks: cooldownPlaybook(srv.URL), Notify: slackNotify(stub)})
	first := postRun(t, d, modelAlert("c00ld0wn00000001", time.Now().Add(-time.Minute)))
	waitFor(t, 60*time.Second, "the holder run to finish", func() bool {
		r := d.run(t, first)
		return r.Status != vocab.StatusQueued && r.Status != vocab.StatusRunning
	})
	if r := d.run(t, first); r.Status != vocab.StatusPartial {
		t.Fatalf("holder run %s, want partial (one step fails)", r.Status)
	}
	waitFor(t, 60*time.Second, "the holder's thread to show its end", func() bool {
		return strings.Contains(strings.Join(replyKeys(threadOf(t, stub, first)), " "), "close/finished")
	})

	second := postRun(t, d, modelAlert("c00ld0wn00000002", time.Now()))
	waitFor(t, 60*time.Second, "the repeat to be skipped", func() bool {
		return d.run(t, second).Status == vocab.StatusSkipped
	})
	if r := d.run(t, second); !strings.HasPrefix(r.Reason, "cooldown: playbook e2e-cooldown ran for run "+first) {
		t.Fatalf("repeat skipped for %q, want the holder's cooldown", r.Reason)
	}
	key := "run/cooldown/" + second + "/e2e-cooldown"
	// A generous ceiling on arrival (the reply normally lands within a
	// second), not a speed check.
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(strings.Join(replyKeys(threadOf(t, stub, first)), " "), key) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s reply in the holder's thread after 30 s\n%s", key, stub.Dump())
		}
		time.Sleep(200 * time.Millisecond)
	}
	var text string
	for _, r := range threadOf(t, stub, first).Replies {
		if r.Metadata != nil && r.Metadata.EventPayload["key"] == key {
			text = r.Text
		}
	}
	if !strings.Contains(text, "fired again") || !strings.Contains(text, "evidence above") {
		t.Errorf("repeat reply %q, want it to say the alert fired again and where the evidence is", text)
	}
}
