package daemon

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
)

// repeatPlaybook: the instance's /metrics twice, triage over it.
const repeatPlaybook = `playbooks:
  - name: repeat
    match:
      - alertname="E2ERepeat"
    steps:
      - id: scrape
        scrape: {gap: 1s, min_requests: -1}
      - id: triage
        triage:
          from: [scrape]
`

// TestServeRepeatedVerdictLinksTheEarlierRun: the second run of an alert on
// the same instance reaches the first's verdict; its verdict's reply in
// the stand-in says "Same verdict as … on this instance", linking the first
// run's page and its verdict's evidence; its run page says so in its
// verdict section. The first run's reply says nothing of it.
func TestServeRepeatedVerdictLinksTheEarlierRun(t *testing.T) {
	t.Parallel()
	var scrapes atomic.Int64
	inst := strings.TrimPrefix(startMetricsTarget(t, &scrapes), "http://")
	stub := newSlack(t)
	o := &daemonOpts{Token: "s", Port: testenv.FreePort(t), Playbooks: repeatPlaybook,
		Notify: slackNotify(stub) + "  storm:\n    window: 0s\n"} // each run its own thread, not a fleet's
	o.Web = fmt.Sprintf("  external_url: http://127.0.0.1:%d\n", o.Port)
	d := startDaemon(t, o)
	var ids []string
	for i, fp := range []string{"4e9ea70000000001", "4e9ea70000000002"} {
		code, b := d.post(t, labelledBody(fp, map[string]string{"alertname": "E2ERepeat", "instance": inst, "model_name": "m"}))
		if ids = append(ids, runID(b)); code != 200 || ids[i] == "" {
			t.Fatalf("webhook %d: %d %s", i, code, b)
		}
		waitFor(t, 60*time.Second, "the run to finish", func() bool { return d.run(t, ids[i]).FinishedAt != nil })
	}
	first, second := d.run(t, ids[0]), d.run(t, ids[1])
	if first.Verdict == nil || second.Verdict == nil || first.Verdict.ID != second.Verdict.ID {
		t.Fatalf("verdicts %v and %v, want the same", first.Verdict, second.Verdict)
	}
	repeat := func(id string) string {
		var line string
		waitFor(t, 30*time.Second, "the triage reply of "+id, func() bool {
			for _, r := range threadOf(t, stub, id).Replies {
				if r.Metadata != nil && r.Metadata.EventPayload["key"] == "step/repeat/triage" {
					line = contextText(r, "repeat")
					return true
				}
			}
			return false
		})
		return line
	}
	if s := repeat(ids[0]); s != "" {
		t.Errorf("the first run's verdict reply says %q, want nothing of a repeat", s)
	}
	page := fmt.Sprintf("http://127.0.0.1:%d/runs/%s", o.Port, ids[0])
	if s := repeat(ids[1]); !strings.Contains(s, "Same verdict as") || !strings.Contains(s, "on this instance") ||
		!strings.Contains(s, "(<"+page+"?") || !strings.Contains(s, "|run "+ids[0]+">): <"+page+"?") ||
		!strings.HasSuffix(s, "#verdict|evidence>") { // each link with the earlier run's page token
		t.Errorf("the second run's verdict reply says %q, want the same verdict linking %s and its evidence", s, page)
	}
	if second.Repeat == nil || second.Repeat.Run.ID != ids[0] || first.Repeat != nil {
		t.Errorf("the API's repeat: first %+v, second %+v, want the second naming the first", first.Repeat, second.Repeat)
	}
	req, _ := http.NewRequest("GET", d.URL+"/runs/"+ids[1], nil)
	if code, body := d.do(t, req); code != 200 || !strings.Contains(string(body), `id="repeat"`) ||
		!strings.Contains(string(body), `href="/runs/`+ids[0]+`#verdict"`) {
		t.Errorf("run page: %d, want the verdict section linking run %s's evidence", code, ids[0])
	}
}
