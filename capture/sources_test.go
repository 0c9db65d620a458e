package capture

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/capture/internal/stepkit"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vocab"
	"github.com/prometheus/alertmanager/template"
)

// TestArtifactKeysKeepPlansAndAttemptsApart: a store never overwrites a key,
// so two plans of one run with a step of the same id, and a step re-run on a
// resumed attempt (new bytes), must each get their own key — else the second
// put fails with a conflict and the step with it.
func TestArtifactKeysKeepPlansAndAttemptsApart(t *testing.T) {
	store, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	env := &vocab.Env{Store: store}
	keys := map[string]string{}
	created := time.Date(2026, 12, 1, 23, 30, 0, 0, time.FixedZone("EST", -5*3600)) // Dec 2 UTC
	alert := template.Alert{Labels: template.KV{"alertname": "VLLMHighTTFT"}}
	for _, in := range []*vocab.Input{
		{RunID: "r1", Plan: "high-ttft", StepID: "snapshot", Attempt: 1, RunCreated: created, Alert: alert, Env: env},
		{RunID: "r1", Plan: "queue-deep", StepID: "snapshot", Attempt: 1, RunCreated: created, Alert: alert, Env: env},
		{RunID: "r1", Plan: "high-ttft", StepID: "snapshot", Attempt: 2, RunCreated: created, Alert: alert, Env: env},
	} {
		body := in.Plan + "/" + in.StepID + " attempt " + string(rune('0'+in.Attempt))
		a, err := stepkit.PutArtifact(context.Background(), in, "snapshot.json", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatalf("%s attempt %d: %v", in.Plan, in.Attempt, err)
		}
		if prev, dup := keys[a.Key]; dup {
			t.Fatalf("key %s used by %s and %s", a.Key, prev, body)
		}
		keys[a.Key] = body
		rc, err := store.Open(context.Background(), a.Key)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || string(got) != body {
			t.Errorf("%s holds %q (%v), want %q", a.Key, got, err, body)
		}
	}
	if _, ok := keys["2026/12/02/VLLMHighTTFT/r1/high-ttft/snapshot/attempt-2/snapshot.json"]; !ok {
		t.Errorf("keys %v: the resumed attempt is not under attempt-2", keys)
	}
}
