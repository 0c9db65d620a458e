package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	goyaml "github.com/goccy/go-yaml"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
)

// chartDir is the Helm chart, relative to this package's working folder (deploy/).
const chartDir = "helm/autocapture"

// helmRelease and helmNamespace are what every render here is named: the
// Kustomize base's names (autocapture in observability).
const (
	helmRelease   = "autocapture"
	helmNamespace = "observability"
)

// helm runs the real helm binary; a missing one fails the test (testenv's rule).
func helm(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(testenv.Tool(t, "helm"), args...)
	// No user's repositories, plugins or cache leak in.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, &helmError{err: err, stderr: stderr.String()}
	}
	return out, nil
}

type helmError struct {
	err    error
	stderr string
}

func (e *helmError) Error() string { return e.err.Error() + ": " + strings.TrimSpace(e.stderr) }

// helmTemplate renders the chart with these value files (and --api-versions).
func helmTemplate(t *testing.T, values []string, apiVersions ...string) ([]byte, error) {
	t.Helper()
	args := []string{"template", helmRelease, chartDir, "--namespace", helmNamespace}
	for _, v := range values {
		args = append(args, "--values", v)
	}
	for _, a := range apiVersions {
		args = append(args, "--api-versions", a)
	}
	return helm(t, args...)
}

// renderChart renders the chart and decodes every object strictly.
func renderChart(t *testing.T, values []string, apiVersions ...string) kubeObjects {
	t.Helper()
	out, err := helmTemplate(t, values, apiVersions...)
	if err != nil {
		t.Fatalf("helm template %v: %v", values, err)
	}
	docs, err := yamlDocs(out)
	if err != nil {
		t.Fatal(err)
	}
	var objs kubeObjects
	for _, d := range docs {
		obj, err := decodeStrict(d)
		if err != nil {
			t.Fatalf("helm template %v: %v\n%s", values, err, d)
		}
		objs.add(t, obj)
	}
	return objs
}

// valuesFile writes a values file for one test case.
func valuesFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "values.yaml")
	must(t, os.WriteFile(p, []byte(body), 0o644))
	return p
}

// chartDaemon is a render's Deployment, its container and its config.
func chartDaemon(t *testing.T, objs kubeObjects) (*appsv1.Deployment, corev1.Container, config.Config) {
	t.Helper()
	dep := objs.deployments[helmRelease]
	if dep == nil || len(dep.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("no Deployment %s with one container", helmRelease)
	}
	cm := objs.configMaps[helmRelease+"-config"]
	if cm == nil {
		t.Fatal("no config ConfigMap")
	}
	cfg := config.Default()
	if err := goyaml.UnmarshalWithOptions([]byte(cm.Data["autocapture.yaml"]), &cfg, goyaml.Strict()); err != nil {
		t.Fatalf("the chart's config does not decode strictly: %v\n%s", err, cm.Data["autocapture.yaml"])
	}
	return dep, dep.Spec.Template.Spec.Containers[0], cfg
}

// haValues is the matrix's PostgreSQL case: 3 replicas on a shared database and S3.
const haValues = `replicaCount: 3
database: {existingSecret: pg, key: dsn}
s3: {existingSecret: s3keys}
config:
  storage:
    backend: s3
    s3: {bucket: b, region: us-east-1, access_key_id: k}
`

func TestHelmLintStrict(t *testing.T) {
	parallel(t)
	for name, values := range map[string][]string{
		"defaults":   nil,
		"postgresql": {valuesFile(t, haValues)},
		"agent":      {filepath.Join(chartDir, "examples", "vllm-agent.yaml")},
		"kustomize":  {filepath.Join(kubeDir, "chart-values.yaml")},
	} {
		args := []string{"lint", "--strict", chartDir}
		for _, v := range values {
			args = append(args, "--values", v)
		}
		out, err := helm(t, args...)
		if err != nil || !strings.Contains(string(out), "0 chart(s) failed") || strings.Contains(string(out), "[WARNING]") {
			t.Errorf("%s: helm lint --strict: %v\n%s", name, err, out)
		}
	}
}
