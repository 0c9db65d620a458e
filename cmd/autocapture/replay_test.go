package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
)

func TestReplayDryRun(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("playbooks: [%q]\nruns: {lookback: 5m}\n", cliData+"a-good.yaml")), 0o644)
	code, out, errOut := cli("replay", "--dry-run", "--config.file", cfg, "--now", "2026-01-01T00:10:00Z", cliData+"payload.json")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	var got []replayAlert
	if err := yaml.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("output is not YAML: %v\n%s", err, out)
	}
	if len(got) != 3 {
		t.Fatalf("got %d alerts, want 3:\n%s", len(got), out)
	}
	first := got[0]
	if first.Fingerprint != "abc123" || first.Window != "2025-12-31T23:55:00Z .. 2026-01-01T00:10:00Z (15m)" {
		t.Errorf("first alert: %q %q", first.Fingerprint, first.Window)
	}
	if len(first.Plans) != 1 || first.Plans[0].Playbook != "kv" || first.Plans[0].Timeout != "1m0s" {
		t.Fatalf("first alert plans: %+v", first.Plans)
	}
	steps := first.Plans[0].Steps
	if q := fmt.Sprint(steps[0].Config); !strings.Contains(q, `vllm:kv_cache_usage_perc{instance="127.0.0.1:8000"}[15m]`) || steps[0].Timeout != "5s" {
		t.Errorf("snapshot: config %s timeout %q", q, steps[0].Timeout)
	}
	if steps[2].When != `steps.triage.verdict == "unexplained"` || steps[2].Tier != "2" {
		t.Errorf("deep: %+v", steps[2])
	}
	second := got[1].Plans[0].Steps[2]
	if !strings.Contains(second.Error, `map has no entry for key "model_name"`) || second.Config != nil {
		t.Errorf("a label the alert lacks: %+v", second)
	}
	if got[1].Fingerprint == "" {
		t.Error("a missing fingerprint is not computed")
	}
	if len(got[2].Plans) != 0 {
		t.Errorf("NodeDown matched %+v", got[2].Plans)
	}
}

func TestReplayNeedsDryRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"without --dry-run", []string{"replay", cliData + "payload.json"}, 2, "only --dry-run"},
		{"no payload", []string{"replay", "--dry-run"}, 2, "usage"},
		{"not a payload", []string{"replay", "--dry-run", cliData + "a-good.yaml"}, 1, "the webhook would answer 400: body is not a JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := cli(tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, errOut, tc.code, tc.want)
			}
		})
	}
}

// TestReplaySeesWhatTheWebhookAccepts: replay decodes through the webhook's own
// decoder: a resolved alert plans nothing, an invalid one is reported as the
// webhook would reject it, and the valid ones are planned.
func TestReplaySeesWhatTheWebhookAccepts(t *testing.T) {
	body := `{"version":"4","status":"firing","alerts":[
	 {"status":"resolved","labels":{"alertname":"VLLMHighTTFT","instance":"127.0.0.1:8000"},"startsAt":"2026-01-01T00:00:00Z","fingerprint":"aa"},
	 {"status":"firing","labels":{"instance":"127.0.0.1:8000"},"startsAt":"2026-01-01T00:00:00Z","fingerprint":"bb"},
	 {"status":"firing","labels":{"alertname":"VLLMHighTTFT","instance":"127.0.0.1:8000","model_name":"m"},"startsAt":"2026-01-01T00:00:00Z","fingerprint":"cc"}]}`
	path := filepath.Join(t.TempDir(), "p.json")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := cli("replay", "--dry-run", "--now", "2026-01-01T00:10:00Z", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(errOut, "alert 1") || !strings.Contains(errOut, "would be rejected") {
		t.Errorf("the invalid alert is not reported: %q", errOut)
	}
	var got []replayAlert
	if err := yaml.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Status != "resolved" || len(got[0].Plans) != 0 || !strings.Contains(got[0].Note, "starts no capture") {
		t.Fatalf("resolved alert: %+v", got)
	}
	if len(got[1].Plans) == 0 || got[1].Plans[0].Playbook != "vllm-high-ttft" {
		t.Fatalf("firing alert not planned with the shipped playbook: %+v", got[1])
	}
}
