package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/handlers"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// firingAlert is one alert as Alertmanager's webhook carries it: labels, a
// fingerprint of our choosing (distinct fingerprints are distinct runs) and a
// startsAt of now.
func firingAlert(alertname, instance, fingerprint string) template.Alert {
	return template.Alert{
		Status:      "firing",
		Labels:      template.KV{"alertname": alertname, "instance": instance, "severity": "page"},
		Annotations: template.KV{"summary": "posted by the e2e test"},
		StartsAt:    time.Now().UTC().Truncate(time.Millisecond),
		Fingerprint: fingerprint,
	}
}

// postWebhook POSTs alerts to the daemon exactly as Alertmanager 0.25 would (a
// version-4 body, bearer token) and returns the daemon's answer for each alert.
func postWebhook(t testing.TB, api string, alerts ...template.Alert) []handlers.AlertResult {
	t.Helper()
	msg := handlers.Message{
		Data: template.Data{
			Receiver: "autocapture", Status: "firing", Alerts: alerts,
			GroupLabels: template.KV{}, CommonLabels: template.KV{}, CommonAnnotations: template.KV{},
			ExternalURL: "http://127.0.0.1:9093",
		},
		Version: handlers.WebhookVersion, GroupKey: "{}:{e2e}",
	}
	body, err := json.Marshal(msg)
	if err != nil {
		t.Fatalf("webhook body: %v", err)
	}
	req, err := http.NewRequest(http.MethodPost, api+"/hooks/alertmanager", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("webhook request: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s/hooks/alertmanager: %v", api, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s/hooks/alertmanager: %d %s", api, resp.StatusCode, raw)
	}
	var out handlers.WebhookResponse
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("webhook answer %s: %v", raw, err)
	}
	if len(out.Alerts) != len(alerts) {
		t.Fatalf("webhook answered %d results for %d alerts: %s", len(out.Alerts), len(alerts), raw)
	}
	return out.Alerts
}

// acceptedRun returns the run id the webhook gave one alert, failing unless the
// alert started a new run.
func acceptedRun(t testing.TB, r handlers.AlertResult) string {
	t.Helper()
	if r.Outcome != runs.OutcomeAccepted || r.RunID == "" {
		t.Fatalf("alert %s (%s): outcome %s, want accepted with a run id (%s %s)", r.Alertname, r.Fingerprint, r.Outcome, r.Reason, r.Detail)
	}
	return r.RunID
}

// waitRun polls one run until it has finished.
func (s *stack) waitRun(t testing.TB, id string, within time.Duration) *runs.Run {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		r := s.run(t, id)
		if finished(r.Status) {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s still %s after %s: %s", id, r.Status, within, describe(r))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// finishedRunsBySim waits until every scenario's instance has at least one
// finished run (alerts delivered by the stack's Alertmanager), lets runs already
// accepted finish, and returns every run, with its steps, by scenario.
func (s *stack) finishedRunsBySim(t *testing.T, scenarios []string, within time.Duration) map[string][]*runs.Run {
	t.Helper()
	byAddr := map[string]string{}
	for sc, sm := range s.Sims {
		byAddr[sm.Addr] = sc
	}
	deadline := time.Now().Add(within)
	for !allCausesDone(s.runs(t), byAddr, scenarios) {
		if time.Now().After(deadline) {
			t.Fatalf("not every scenario has a finished run after %s; alerts firing: %v\ndaemon logs:\n%s",
				within, s.Prom.Query(t, `ALERTS{alertstate="firing"}`), tail(s.Daemon.Logs(), 3000))
		}
		time.Sleep(2 * time.Second)
	}
	out := map[string][]*runs.Run{}
	for _, lr := range waitAllFinished(t, s, 60*time.Second) {
		sc := byAddr[lr.Labels["instance"]]
		if sc == "" {
			t.Errorf("run %s for an unknown instance %q", lr.ID, lr.Labels["instance"])
			continue
		}
		out[sc] = append(out[sc], s.run(t, lr.ID))
	}
	return out
}

// checkOneLineFailure asserts that a step failed with a reason among want and an
// error of one line that names what failed (contains every needle).
func checkOneLineFailure(t *testing.T, r *runs.Run, st *executor.StepRecord, want []string, needles ...string) {
	t.Helper()
	where := fmt.Sprintf("run %s %s step %s (%s)", r.ID, r.Alertname, st.ID, st.Kind)
	if st.Status != vocab.StatusFailed {
		t.Errorf("%s: status %s, want failed: %s", where, st.Status, describe(r))
		return
	}
	ok := false
	for _, w := range want {
		ok = ok || st.Reason == w
	}
	if !ok {
		t.Errorf("%s: reason %q, want one of %v (error %q)", where, st.Reason, want, st.Error)
	}
	if st.Error == "" || strings.ContainsAny(st.Error, "\r\n") {
		t.Errorf("%s: error is not one line: %q", where, st.Error)
	}
	for _, n := range needles {
		if !strings.Contains(st.Error, n) {
			t.Errorf("%s: error %q does not name %q", where, st.Error, n)
		}
	}
}

// checkArtifactsKept asserts that every artifact the step recorded is on disk in
// the daemon's local store with the recorded size, and that names are among them.
func (s *stack) checkArtifactsKept(t *testing.T, r *runs.Run, st *executor.StepRecord, names ...string) {
	t.Helper()
	have := map[string]bool{}
	for _, a := range st.Artifacts {
		have[a.Name] = true
		fi, err := os.Stat(filepath.Join(s.Dir, "data", "artifacts", filepath.FromSlash(a.Key)))
		if err != nil {
			t.Errorf("run %s step %s: artifact %s: %v", r.ID, st.ID, a.Key, err)
			continue
		}
		if fi.Size() != a.Size || a.Size == 0 {
			t.Errorf("run %s step %s: artifact %s is %d bytes on disk, recorded %d", r.ID, st.ID, a.Key, fi.Size(), a.Size)
		}
	}
	for _, n := range names {
		if !have[n] {
			t.Errorf("run %s step %s: no artifact %s among %v", r.ID, st.ID, n, st.Artifacts)
		}
	}
}

// stepsOfKind returns the run's steps of one kind.
func stepsOfKind(r *runs.Run, kind string) []*executor.StepRecord {
	var out []*executor.StepRecord
	for i := range r.Steps {
		if r.Steps[i].Kind == kind {
			out = append(out, &r.Steps[i])
		}
	}
	return out
}
