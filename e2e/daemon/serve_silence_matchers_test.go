package daemon

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/slackstub"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	slacknotify "github.com/autocapture/autocapture/notify/slack"
)

// TestServeSilenceMatchersFromThePlaybook: through the real binary and a
// real Alertmanager, a playbook's silence: {matchers: [alertname,
// model_name]} makes a silence Alertmanager lists with exactly those
// matchers, though the playbook was edited to name others after the run
// opened (the run keeps its plan's choice); a run opened after the edit
// is silenced on the edited labels.
func TestServeSilenceMatchersFromThePlaybook(t *testing.T) {
	t.Parallel()
	const alertname = "E2ESilenceMatchers"
	am := testenv.StartAlertmanager(t, amNoReceivers)
	stub := newSlack(t)
	target := httptest.NewServer(&slowTarget{hits: map[string]int{}, slowHit: make(chan struct{}, 1)})
	t.Cleanup(target.Close)
	playbook := func(matchers string) string {
		return silencePlaybook(alertname, target.URL) + "    silence: {matchers: [" + matchers + "]}\n"
	}
	o := &daemonOpts{Token: "s", Playbooks: playbook("alertname, model_name"), Notify: silenceNotify(stub),
		More: alertmanagerAt(am.URL)}
	d := startDaemon(t, o)
	fire := func(fp, model string) (string, slackstub.Message) {
		t.Helper()
		return fireAndWait(t, d, stub, labelledBody(fp, map[string]string{"alertname": alertname, "instance": "127.0.0.1:1", "model_name": model}))
	}
	silenceOf := func(runID string) map[string]string {
		t.Helper()
		var got []amSilence
		waitFor(t, 30*time.Second, "the run's silence in Alertmanager", func() bool {
			got = got[:0]
			for _, s := range amSilences(t, am.URL) {
				if strings.Contains(s.Comment, runID) {
					got = append(got, s)
				}
			}
			return len(got) > 0
		})
		if len(got) != 1 || got[0].Status.State != "active" {
			t.Fatalf("Alertmanager holds %+v for run %s, want one active silence", got, runID)
		}
		for _, m := range got[0].Matchers {
			if m.IsRegex {
				t.Errorf("matcher %s=~%s, want equality", m.Name, m.Value)
			}
		}
		return got[0].matchers()
	}

	first, parent := fire("5113ce00000000a1", "llama-70b")
	stamp := d.metric(t, "autocapture_config_last_reload_success_timestamp_seconds")
	time.Sleep(1100 * time.Millisecond) // the timestamp counts seconds
	if err := os.WriteFile(filepath.Join(o.Dir, "playbooks.yaml"), []byte(playbook("alertname, instance")), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the edited playbook to load", func() bool {
		return d.metric(t, "autocapture_config_last_reload_success_timestamp_seconds") > stamp
	})
	click(t, d, alice, parent.TS, "1795921700.000001", slacknotify.SilenceAction("1h"), first)
	if m := silenceOf(first); len(m) != 2 || m["alertname"] != alertname || m["model_name"] != "llama-70b" {
		t.Errorf("the first run's silence matches %v, want exactly alertname and model_name (its plan's)", m)
	}
	waitFor(t, 30*time.Second, "the thread's reply", func() bool {
		rs := actionReplies(threadOf(t, stub, first))
		return len(rs) == 1 && strings.Contains(rs[0].Text, "alertname="+alertname+", model_name=llama-70b")
	})

	second, parent := fire("5113ce00000000a2", "llama-8b")
	click(t, d, alice, parent.TS, "1795921700.000002", slacknotify.SilenceAction("4h"), second)
	if m := silenceOf(second); len(m) != 2 || m["alertname"] != alertname || m["instance"] != "127.0.0.1:1" {
		t.Errorf("the second run's silence matches %v, want exactly alertname and instance (the edited playbook's)", m)
	}
}

// labelledBody is a firing webhook of one alert with labels.
func labelledBody(fingerprint string, labels map[string]string) []byte {
	ls, _ := json.Marshal(labels)
	return []byte(fmt.Sprintf(`{"version":"4","groupKey":"{}:{}","status":"firing","receiver":"autocapture","alerts":[`+
		`{"status":"firing","labels":%s,"annotations":{},"startsAt":%q,"endsAt":"0001-01-01T00:00:00Z","fingerprint":%q}]}`,
		ls, time.Now().Add(-time.Minute).UTC().Format(time.RFC3339Nano), fingerprint))
}
