package deploy

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"sigs.k8s.io/yaml"
)

var updateChart = flag.Bool("update-chart", false, "rewrite the chart's copies of deploy/prometheus and deploy/grafana, the Kustomize base and the chart README from their sources")

// TestHelmChartFilesAreTheShippedOnes: the rules and dashboards the chart
// carries are deploy/prometheus' and deploy/grafana's files, byte for byte
// (helm reads no file outside the chart; -update-chart copies them).
func TestHelmChartFilesAreTheShippedOnes(t *testing.T) {
	parallel(t)
	for src, dst := range map[string]string{"prometheus/*.yml": "files/prometheus", "grafana/*.json": "files/grafana"} {
		want, err := filepath.Glob(src)
		if err != nil || len(want) == 0 {
			t.Fatalf("%s: none (%v)", src, err)
		}
		have, _ := filepath.Glob(filepath.Join(chartDir, dst, "*"))
		var names []string
		for _, p := range want {
			names = append(names, filepath.Base(p))
			b, err := os.ReadFile(p)
			must(t, err)
			to := filepath.Join(chartDir, dst, filepath.Base(p))
			if *updateChart {
				must(t, os.WriteFile(to, b, 0o644))
				continue
			}
			if got, err := os.ReadFile(to); err != nil || !bytes.Equal(got, b) {
				t.Errorf("%s differs from %s (rerun go -C e2e/deploy test . -run TestHelmChartFilesAreTheShippedOnes -update-chart)", to, p)
			}
		}
		for _, p := range have {
			if !slices.Contains(names, filepath.Base(p)) {
				t.Errorf("%s has no source in %s", p, src)
			}
		}
	}
}

// TestHelmPrometheusOperator: with the CRDs, the ServiceMonitor scrapes the
// Service's port and the PrometheusRule's groups are the rule files
// promtool's tests check, decoded with prometheus-operator's own types;
// without them, neither renders (TestHelmDefaults).
func TestHelmPrometheusOperator(t *testing.T) {
	parallel(t)
	objs := renderChart(t, []string{valuesFile(t, "grafana: {dashboards: {enabled: true}}\n")}, "monitoring.coreos.com/v1")
	sm, svc := objs.monitors[helmRelease], objs.services[helmRelease]
	if sm == nil || svc == nil || len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != svc.Spec.Ports[0].Name ||
		!selects(t, &sm.Spec.Selector, svc.Labels) {
		t.Fatalf("ServiceMonitor %+v does not select the Service's http port", sm)
	}
	pr := objs.rules[helmRelease]
	if pr == nil {
		t.Fatal("no PrometheusRule")
	}
	var want []monitoringv1.RuleGroup
	files, _ := filepath.Glob("prometheus/*.yml")
	slices.Sort(files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		must(t, err)
		var spec monitoringv1.PrometheusRuleSpec
		if err := yaml.UnmarshalStrict(b, &spec); err != nil {
			t.Fatalf("%s as a PrometheusRule's spec: %v", f, err)
		}
		want = append(want, spec.Groups...)
	}
	if len(want) < 3 || !reflect.DeepEqual(pr.Spec.Groups, want) {
		t.Errorf("the PrometheusRule's %d groups differ from the %d of %v", len(pr.Spec.Groups), len(want), files)
	}
	off := renderChart(t, []string{valuesFile(t, "serviceMonitor: {enabled: false}\nprometheusRule: {enabled: false}\n")}, "monitoring.coreos.com/v1")
	if len(off.monitors)+len(off.rules) != 0 {
		t.Error("operator objects rendered with enabled: false")
	}
	for _, f := range []string{"autocapture.json", "serving.json"} {
		cm := objs.configMaps[helmRelease+"-dashboard-"+f[:len(f)-len(".json")]]
		b, err := os.ReadFile(filepath.Join("grafana", f))
		must(t, err)
		if cm == nil || cm.Labels["grafana_dashboard"] != "1" || cm.Data[f] != string(bytes.TrimRight(b, "\n")) {
			t.Errorf("dashboard %s: no ConfigMap labelled for Grafana's sidecar carrying the file", f)
		}
	}
}

// TestHelmAgentSnippet: the documented agent values admit the daemon's pods,
// and only them, to the agent port of the vLLM pods, in their namespace.
func TestHelmAgentSnippet(t *testing.T) {
	parallel(t)
	objs := renderChart(t, []string{filepath.Join(chartDir, "examples", "vllm-agent.yaml")})
	dep, c, cfg := chartDaemon(t, objs)
	if got := secretOf(t, dep.Spec.Template.Spec, c, cfg.Profiling.AgentTokenFile); got != "autocapture-agent-token/token" {
		t.Errorf("profiling.agent_token_file %q from %q", cfg.Profiling.AgentTokenFile, got)
	}
	np := objs.policies[helmRelease+"-agent"]
	if np == nil || np.Namespace != "vllm" || !selects(t, &np.Spec.PodSelector, map[string]string{"app": "vllm"}) {
		t.Fatalf("agent NetworkPolicy %+v: want one in vllm selecting app=vllm", np)
	}
	var agentRule bool
	for _, r := range np.Spec.Ingress {
		for _, p := range r.Ports {
			if p.Port.IntValue() != 9101 {
				continue
			}
			agentRule = len(r.From) == 1 && r.From[0].NamespaceSelector != nil &&
				r.From[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] == helmNamespace &&
				selects(t, r.From[0].PodSelector, dep.Spec.Template.Labels) &&
				!selects(t, r.From[0].PodSelector, map[string]string{"app": "vllm"})
		}
	}
	if !agentRule {
		t.Errorf("agent NetworkPolicy ingress %+v: port 9101 not admitted from the daemon's pods alone", np.Spec.Ingress)
	}
}

// TestHelmPlaybooks: your playbooks come from a ConfigMap mounted as a
// folder (the reload sees updates), tried before the shipped set.
func TestHelmPlaybooks(t *testing.T) {
	parallel(t)
	objs := renderChart(t, []string{valuesFile(t, "playbooks:\n  mine.yaml: |\n    playbooks: []\n")})
	dep, c, cfg := chartDaemon(t, objs)
	if len(cfg.Playbooks) != 1 || !cfg.ShippedPlaybooks {
		t.Fatalf("playbooks %q shipped %v: want the ConfigMap's folder over the shipped set", cfg.Playbooks, cfg.ShippedPlaybooks)
	}
	vol, m, _ := mountedAt(dep.Spec.Template.Spec, c, filepath.Dir(cfg.Playbooks[0]))
	if vol == nil || vol.ConfigMap == nil || m.SubPath != "" {
		t.Fatalf("playbooks %s: not a ConfigMap mounted as a folder", cfg.Playbooks[0])
	}
	if cm := objs.configMaps[vol.ConfigMap.Name]; cm == nil || cm.Data["mine.yaml"] != "playbooks: []\n" {
		t.Errorf("playbooks ConfigMap %s: %v", vol.ConfigMap.Name, cm)
	}
}
