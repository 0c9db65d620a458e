package daemon

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// selfProbePlaybook GETs the runs API of whatever the alert's instance label says.
const selfProbePlaybook = `playbooks:
  - name: self-probe
    match: ['alertname="SelfProbe"']
    steps:
      - id: api
        http: {path: /api/v1/runs}
`

// TestServeRefusesItsOwnAddress: with the default allow-list (loopback), an
// alert whose instance label is the daemon's own listen address cannot make a
// step call the daemon's API; the step fails `refused` naming the rule.
// Before, the http step read the runs API (no auth on loopback) and stored it.
func TestServeRefusesItsOwnAddress(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, &daemonOpts{Playbooks: selfProbePlaybook})
	self := fmt.Sprintf("127.0.0.1:%d", d.Port)
	body := fmt.Sprintf(`{"version":"4","status":"firing","alerts":[{"status":"firing",`+
		`"labels":{"alertname":"SelfProbe","instance":%q},"startsAt":%q,"fingerprint":"5e1f5e1f5e1f5e1f"}]}`,
		self, time.Now().UTC().Format(time.RFC3339Nano))
	if code, b := d.post(t, []byte(body)); code != 200 {
		t.Fatalf("webhook: %d %s", code, b)
	}
	var step struct{ Status, Reason, Error string }
	waitFor(t, time.Minute, "the self-probe run to finish", func() bool {
		runs := d.runs(t, "SelfProbe")
		if len(runs) != 1 || (runs[0].Status == "queued" || runs[0].Status == "running") {
			return false
		}
		req, _ := http.NewRequest("GET", d.URL+"/api/v1/runs/"+runs[0].ID, nil)
		_, b := d.do(t, req)
		var r struct {
			Steps []struct{ Status, Reason, Error string }
		}
		if err := json.Unmarshal(b, &r); err != nil || len(r.Steps) != 1 {
			t.Fatalf("run: %v %s", err, b)
		}
		step = r.Steps[0]
		return true
	})
	if step.Status != "failed" || step.Reason != "refused" || !strings.Contains(step.Error, "own API") || !strings.Contains(step.Error, self) {
		t.Fatalf("step %+v, want failed, refused, naming the daemon's own address %s", step, self)
	}
}
