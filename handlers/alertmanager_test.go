package handlers

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/runner/runs"
)

var update = flag.Bool("update", false, "rewrite testdata/alertmanager-*.json and the fuzz seeds from a real Alertmanager")

// TestAlertmanagerPayload points a real Alertmanager at this package's handler
// (over a fake run service), fires an alert and then resolves it: the real
// firing and resolved bodies must decode and get the right outcomes. With
// -update it saves both bodies as testdata (the fuzz seeds and decode tests use them).
func TestAlertmanagerPayload(t *testing.T) {
	h := newHarness(t, withToken("am-token"))
	bodies := make(chan []byte, 8)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		h.srv.ServeHTTP(w, r)
		bodies <- b
	}))
	defer hook.Close()
	am := testenv.StartAlertmanager(t, fmt.Sprintf(`
route:
  receiver: autocapture
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: autocapture
    webhook_configs:
      - url: %s/hooks/alertmanager
        send_resolved: true
        http_config:
          authorization:
            credentials: am-token
`, hook.URL))
	labels := map[string]string{"alertname": "VLLMHighTTFT", "instance": "127.0.0.1:8000", "model_name": "llama"}
	start := time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
	am.PostAlerts(t, testenv.PostableAlert{Labels: labels, StartsAt: start,
		Annotations: map[string]string{"summary": "p99 TTFT above 2s"}})
	firing := waitBody(t, bodies, 15*time.Second)
	am.PostAlerts(t, testenv.PostableAlert{Labels: labels, StartsAt: start, EndsAt: time.Now().Add(-time.Second)})
	resolved := waitBody(t, bodies, 15*time.Second)

	for name, b := range map[string][]byte{"firing": firing, "resolved": resolved} {
		p, err := Decode(b)
		if err != nil {
			t.Fatalf("%s body does not decode: %v\n%s", name, err, b)
		}
		if len(p.Message.Alerts) != 1 || p.Message.Alerts[0].Status != name || p.Message.Alerts[0].Fingerprint == "" {
			t.Fatalf("%s body decoded as %+v", name, p.Message)
		}
		if *update {
			if err := os.WriteFile(filepath.Join("testdata", "alertmanager-0.25-"+name+".json"), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := map[runs.Outcome]float64{runs.OutcomeAccepted: 1, runs.OutcomeResolved: 1}
	for o, n := range want {
		if got := testutil.ToFloat64(h.srv.metrics.alerts.WithLabelValues(string(o))); got != n {
			t.Errorf("alerts %s = %v, want %v", o, got, n)
		}
	}
}

func waitBody(t *testing.T, ch <-chan []byte, d time.Duration) []byte {
	t.Helper()
	select {
	case b := <-ch:
		return b
	case <-time.After(d):
		t.Fatalf("no webhook from Alertmanager within %v", d)
		return nil
	}
}
