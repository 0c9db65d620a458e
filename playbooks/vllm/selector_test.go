package vllm_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/capture/gpu"
	"github.com/autocapture/autocapture/capture/peers"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/vocab"
)

// TestGPUSelectorMapping renders the vllm-evidence preset's gpu selector: by
// default the DCGM exporter on the instance's host, its name regex-quoted (an
// IP, a DNS name, a bracketed IPv6 address), and a playbook's gpu_sel var in
// its place (Kubernetes pod mapping). Each must build a gpu step.
func TestGPUSelectorMapping(t *testing.T) {
	set := loadWithPresets(t, `playbooks:
  - name: host
    match: ['alertname="A"']
    vars: {sel: 'instance={{ .Labels.instance | promQuote }}'}
    steps:
      - use: vllm-evidence
  - name: pods
    match: ['alertname="B"']
    vars:
      sel: 'instance={{ .Labels.instance | promQuote }}'
      gpu_sel: 'exported_pod={{ .Labels.pod | promQuote }},exported_namespace={{ .Labels.namespace | promQuote }}'
    steps:
      - use: vllm-evidence
`)
	for _, c := range []struct{ alertname, instance, want string }{
		{"A", "10.0.0.7:8000", `instance=~"10\\.0\\.0\\.7:[0-9]+"`},
		{"A", "gpu-node-3.example.com:8000", `instance=~"gpu-node-3\\.example\\.com:[0-9]+"`},
		{"A", "[fd00::7]:8000", `instance=~"\\[fd00::7\\]:[0-9]+"`},
		{"B", "10.1.2.3:8000", `exported_pod="vllm-0",exported_namespace="llm"`},
	} {
		alert := template.Alert{Status: "firing", StartsAt: time.Unix(1.8e9, 0),
			Labels: template.KV{"alertname": c.alertname, "instance": c.instance, "pod": "vllm-0", "namespace": "llm"}}
		ps := planStep(t, set, alert, "gpu")
		if ps == nil {
			t.Errorf("%s: no gpu step", c.instance)
			continue
		}
		cfg, ok := ps.Config.(*gpu.Config)
		if ps.RenderErr != nil || ps.Step == nil || !ok || cfg.Selector != c.want {
			t.Errorf("%s: selector %+v (%v), want %s", c.instance, ps.Config, ps.RenderErr, c.want)
		}
	}
}

// TestPeersSelector renders the vllm-evidence preset's peers selector: the
// alert's model_name by default, nothing for an alert without one (the step
// then says "peers not measured"), and a playbook's peers_sel var in its
// place (one cluster's replicas of the model).
func TestPeersSelector(t *testing.T) {
	set := loadWithPresets(t, `playbooks:
  - name: model
    match: ['alertname="A"']
    vars: {sel: 'instance={{ .Labels.instance | promQuote }}'}
    steps:
      - use: vllm-evidence
  - name: cluster
    match: ['alertname="B"']
    vars:
      sel: 'instance={{ .Labels.instance | promQuote }}'
      peers_sel: 'model_name={{ .Labels.model_name | promQuote }},cluster={{ .Labels.cluster | promQuote }}'
    steps:
      - use: vllm-evidence
`)
	for _, c := range []struct {
		alertname string
		labels    template.KV
		want      string
	}{
		{"A", template.KV{"model_name": "llama"}, `model_name="llama"`},
		{"A", template.KV{}, ``},
		{"B", template.KV{"model_name": "llama", "cluster": "eu-1"}, `model_name="llama",cluster="eu-1"`},
	} {
		labels := template.KV{"alertname": c.alertname, "instance": "10.0.0.7:8000"}
		for k, v := range c.labels {
			labels[k] = v
		}
		alert := template.Alert{Status: "firing", StartsAt: time.Unix(1.8e9, 0), Labels: labels}
		ps := planStep(t, set, alert, "peers")
		if ps == nil {
			t.Errorf("%v: no peers step", labels)
			continue
		}
		cfg, ok := ps.Config.(*peers.Config)
		if ps.RenderErr != nil || ps.Step == nil || !ok || cfg.Selector != c.want {
			t.Errorf("%v: selector %+v (%v), want %q", labels, ps.Config, ps.RenderErr, c.want)
		}
	}
}

// loadWithPresets loads the shipped presets.yaml with playbook (YAML), both
// written to a temp dir as a deployment would mount them.
func loadWithPresets(t *testing.T, playbook string) *playbooks.Set {
	t.Helper()
	presets, err := os.ReadFile("presets.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, body := range map[string][]byte{"presets.yaml": presets, "p.yaml": []byte(playbook)} {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	set, err := playbooks.LoadFiles([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// planStep plans alert, which must match exactly one playbook, and returns
// its step id (nil when the plan has none). A duplicate id fails the test.
func planStep(t *testing.T, set *playbooks.Set, alert template.Alert, id string) *playbooks.PlannedStep {
	t.Helper()
	plans, err := set.Plan(alert, vocab.Window{Start: alert.StartsAt.Add(-time.Hour), End: alert.StartsAt})
	if err != nil || len(plans) != 1 {
		t.Fatalf("%v: plans %v, %v", alert.Labels, plans, err)
	}
	var found *playbooks.PlannedStep
	for i, ps := range plans[0].Steps {
		if ps.ID != id {
			continue
		}
		if found != nil {
			t.Fatalf("%v: two %s steps", alert.Labels, id)
		}
		found = &plans[0].Steps[i]
	}
	return found
}
