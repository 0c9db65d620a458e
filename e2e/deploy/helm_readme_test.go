package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	yamlv3 "go.yaml.in/yaml/v3"
)

// chartReadmePreamble opens the chart's generated README.
const chartReadmePreamble = `# autocapture Helm chart

<!-- Generated from values.yaml's "# --" comments by e2e/deploy's
TestHelmChartReadme; do not edit: change the comment and rerun
go -C e2e/deploy test . -run TestHelmChartReadme -update-chart -->

    kubectl create secret generic autocapture-auth --from-literal=bearer_token=$(openssl rand -hex 32)
    helm install autocapture deploy/helm/autocapture
    helm status autocapture   # the Alertmanager receiver to add

docs/deploy.md ("Helm") has the serving side and the upgrade notes.

## Values

| key | default | |
|---|---|---|
`

// chartValueRow is one documented value.
type chartValueRow struct{ key, def, doc string }

// chartValueRows walks values.yaml: a key whose head comment starts with
// "# --" is documented as a whole; a mapping without one is walked into;
// any other key is an error naming it (every value is documented).
func chartValueRows(n *yamlv3.Node, prefix string) ([]chartValueRow, error) {
	var rows []chartValueRow
	var errs []string
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key := prefix + k.Value
		if doc, ok := strings.CutPrefix(strings.TrimSpace(k.HeadComment), "# --"); ok {
			rows = append(rows, chartValueRow{key, chartDefault(v), commentText(doc)})
			continue
		}
		if v.Kind != yamlv3.MappingNode {
			errs = append(errs, key)
			continue
		}
		sub, err := chartValueRows(v, key+".")
		if err != nil {
			errs = append(errs, err.Error())
		}
		rows = append(rows, sub...)
	}
	if len(errs) > 0 {
		return rows, fmt.Errorf("no \"# --\" comment: %s", strings.Join(errs, ", "))
	}
	return rows, nil
}

// commentText joins a comment's lines without their "#".
func commentText(c string) string {
	var words []string
	for _, l := range strings.Split(c, "\n") {
		words = append(words, strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "#")))
	}
	return strings.TrimSpace(strings.Join(words, " "))
}

// chartDefault is a value as a table cell: JSON, or a pointer to
// values.yaml where that would not fit a cell.
func chartDefault(v *yamlv3.Node) string {
	var x any
	if err := v.Decode(&x); err != nil {
		return "?"
	}
	b, err := json.Marshal(x)
	if err != nil || len(b) > 60 {
		return "see values.yaml"
	}
	return "`" + string(b) + "`"
}

func chartReadme(values []byte) ([]byte, error) {
	var doc yamlv3.Node
	if err := yamlv3.Unmarshal(values, &doc); err != nil {
		return nil, fmt.Errorf("values.yaml: %w", err)
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yamlv3.MappingNode {
		return nil, fmt.Errorf("values.yaml: not a mapping")
	}
	rows, err := chartValueRows(doc.Content[0], "")
	if err != nil {
		return nil, fmt.Errorf("values.yaml: %w", err)
	}
	var b bytes.Buffer
	b.WriteString(chartReadmePreamble)
	for _, r := range rows {
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", r.key, r.def, strings.ReplaceAll(r.doc, "|", `\|`))
	}
	return b.Bytes(), nil
}

// TestHelmChartReadme: the chart's README is what its values.yaml comments
// make today, and every value has one.
func TestHelmChartReadme(t *testing.T) {
	parallel(t)
	values, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	must(t, err)
	got, err := chartReadme(values)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"`replicaCount`", "`database.existingSecret`", "`agent.networkPolicy.port`", "`grafana.dashboards.folder`"} {
		if !bytes.Contains(got, []byte(key)) {
			t.Errorf("the README has no row for %s", key)
		}
	}
	if _, err := chartReadme([]byte("documented:\n  # -- yes\n  a: 1\n  b: 2\n")); err == nil || !strings.Contains(err.Error(), "documented.b") {
		t.Errorf("an undocumented value: error %v, want one naming documented.b", err)
	}
	generated(t, filepath.Join(chartDir, "README.md"), got)
}
