package playbooks

import (
	"reflect"
	"strings"
	"testing"

	amtemplate "github.com/prometheus/alertmanager/template"
)

// TestRenderTreeRendersKeysAndValues: a templated map key is rendered like a
// value, never sent as its template text; a missing label in a key fails.
func TestRenderTreeRendersKeysAndValues(t *testing.T) {
	ts := map[string]*tmpl{}
	for _, src := range []string{"{{ .Labels.key }}", "{{ .Labels.instance }}", "{{ .Labels.absent }}"} {
		tp, err := parseTemplate("s", src)
		if err != nil {
			t.Fatal(err)
		}
		ts[src] = tp
	}
	data := &TemplateData{Labels: amtemplate.KV{"key": "service.instance.id", "instance": "10.0.0.7:8000"}}
	got, err := renderTree(map[string]any{"match": map[string]any{"{{ .Labels.key }}": "{{ .Labels.instance }}"}}, ts, data)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"match": map[string]any{"service.instance.id": "10.0.0.7:8000"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	_, err = renderTree(map[string]any{"{{ .Labels.absent }}": "x"}, ts, data)
	if err == nil || !strings.Contains(err.Error(), `no entry for key "absent"`) {
		t.Fatalf("missing label in a key: %v", err)
	}
}
