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

// TestTemplatesAreBounded: what could run away at render time is refused at
// parse time (a range over an integer loops that many times; template calls
// can recurse), and output or a function result beyond maxRender fails the
// render instead of growing.
func TestTemplatesAreBounded(t *testing.T) {
	for _, tc := range []struct{ name, src, parseErr, renderErr string }{
		{"range over the labels", `{{ range $k, $v := .Labels }}{{ $k }}={{ $v }},{{ end }}`, "", ""},
		{"range over an integer", `{{ range .Window.StartUnix }}{{ end }}`, "range: only over .Labels", ""},
		{"range over a literal", `{{ range 1000000000 }}{{ end }}`, "range: only over .Labels", ""},
		{"range over a variable", `{{ $n := 9 }}{{ range $n }}{{ end }}`, "range: only over .Labels", ""},
		{"range hidden in an if", `{{ if true }}{{ range .Window.EndUnix }}{{ end }}{{ end }}`, "range: only over .Labels", ""},
		{"define", `{{ define "a" }}{{ template "a" }}{{ end }}x`, "define and block are not allowed", ""},
		{"template call", `{{ template "fuzz" }}`, "calling templates is not allowed", ""},
		{"wide printf", `{{ printf "%0999999d" 1 }}`, "", "printf: result over 65536 bytes"},
		{"doubling through print", `{{ $x := "aaaaaaaaaaaaaaaa" }}` + strings.Repeat(`{{ $x = print $x $x }}`, 20) + `{{ len $x }}`, "", "print: result over"},
		{"output over the cap", `{{ range .Labels }}{{ printf "%060000d" 1 }}{{ end }}`, "", "output over 65536 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp, err := parseTemplate("fuzz", tc.src)
			if tc.parseErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.parseErr) {
					t.Fatalf("parse: %v, want %q", err, tc.parseErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			data := &TemplateData{Labels: amtemplate.KV{"a": "1", "b": "2"}, Vars: map[string]string{}}
			out, err := tp.render(data)
			if tc.renderErr == "" {
				if err != nil || out == "" {
					t.Fatalf("render: %q, %v", out, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.renderErr) || out != "" {
				t.Fatalf("render: %d bytes, %v; want %q", len(out), err, tc.renderErr)
			}
		})
	}
}
