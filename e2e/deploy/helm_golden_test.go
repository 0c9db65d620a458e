package deploy

import (
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/autocapture/autocapture/internal/testkit/golden"
)

// generated compares a rendering with its committed file (or writes it
// with -update-chart), naming the first line that differs.
func generated(t *testing.T, file string, got []byte) {
	t.Helper()
	golden.Check(t, file, got, *updateChart, "go -C e2e/deploy test . -run 'Helm|Kustomize' -update-chart")
}

// TestKustomizeBaseIsTheChart: the Kustomize base's manifests are the
// chart rendered with the base's values, so neither can drift (rerun with
// -update-chart after changing the chart or chart-values.yaml).
func TestKustomizeBaseIsTheChart(t *testing.T) {
	parallel(t)
	out, err := helmTemplate(t, []string{filepath.Join(kubeDir, "chart-values.yaml")})
	if err != nil {
		t.Fatal(err)
	}
	generated(t, filepath.Join(kubeDir, "autocapture.yaml"), out)
}

// chartVersion is Chart.yaml's version.
func chartVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	must(t, err)
	var c struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	must(t, yaml.Unmarshal(b, &c))
	if c.Version == "" || c.Version != c.AppVersion {
		t.Fatalf("Chart.yaml version %q appVersion %q: the chart is released with the daemon, one version", c.Version, c.AppVersion)
	}
	return c.Version
}

// TestHelmUpgradeGolden: the defaults' rendering is the committed golden
// of the chart's version. A change to what an upgrade renders bumps the
// version and commits its golden beside the previous one, so the diff
// between the two goldens is what the upgrade changes, and review sees it.
func TestHelmUpgradeGolden(t *testing.T) {
	parallel(t)
	out, err := helmTemplate(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	generated(t, filepath.Join("helm", "goldens", "autocapture-"+chartVersion(t)+".yaml"), out)
}
