package lifecycle

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/internal/untrusted"
)

// TestDecodeRunBoundsTheAlert: a run whose stored alert holds a 1 MB label
// and annotation reads back with both clipped (every surface, log and
// notifier reads the run through decodeRun), while the manifest, the run's
// artifact, keeps the alert as received.
func TestDecodeRunBoundsTheAlert(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	a := template.Alert{Status: "firing", Fingerprint: "fp", StartsAt: time.Unix(1, 0),
		Labels: template.KV{"alertname": "A", "instance": big}, Annotations: template.KV{"summary": big}}
	raw, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	r, err := decodeRun(database.Run{ID: "r1", Alert: string(raw)})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{r.Labels["instance"], r.Annotations["summary"], r.alert.Labels["instance"], r.alert.Annotations["summary"]} {
		if len(v) > untrusted.MaxValue || !strings.Contains(v, "clipped") {
			t.Errorf("value of %d bytes read back, want at most %d with the marker", len(v), untrusted.MaxValue)
		}
	}
	if r.Labels["alertname"] != "A" {
		t.Errorf("a short label changed: %q", r.Labels["alertname"])
	}
	in := (&Runs{}).manifestInput(r, nil)
	if in.Alert.Labels["instance"] != big || in.Alert.Annotations["summary"] != big {
		t.Error("the manifest does not keep the alert as received")
	}
}
