package playbooks

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amtemplate "github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/internal/yamlerr"
	"github.com/autocapture/autocapture/playbooks/vllm"
)

// seedFiles are the shipped playbooks and this package's testdata.
func seedFiles(f *testing.F) [][]byte {
	f.Helper()
	var out [][]byte
	names, _ := filepath.Glob("vllm/*.yaml")
	more, _ := filepath.Glob("testdata/*.yaml")
	cli, _ := filepath.Glob("testdata/cli/*.yaml")
	for _, n := range append(append(names, more...), cli...) {
		b, err := os.ReadFile(n)
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, b)
	}
	if len(out) < 5 {
		f.Fatalf("only %d seed files", len(out))
	}
	return out
}

// FuzzParse checks the loader's promises on any file: it never panics; it
// either loads or fails with errors that each carry the file and a position
// (line and column from 1); a file that loads plans for an alert without
// panicking, and each of its playbooks rebuilds from its stored plan to the
// same digest and steps (what a resumed run does).
//
// Seeds: the shipped playbooks (with their presets appended, so uses resolve
// in the one file) and testdata.
//
//	go test ./playbooks -run '^$' -fuzz '^FuzzParse$' -fuzztime 60s
func FuzzParse(f *testing.F) {
	files := seedFiles(f)
	presets, err := vllm.FS.ReadFile("presets.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, b := range files {
		f.Add(b)
		f.Add(append(append([]byte{}, b...), presets...))
	}
	f.Add([]byte(""))
	f.Add([]byte("playbooks: [{name: a, steps: [{use: x}]}]\n"))
	f.Add([]byte("presets:\n- name: x\n  steps: [{id: a, ttriage: {}}]\nplaybooks:\n- name: p\n  steps:\n  - use: x\n    with: {v: '{{ .Labels.a }}'}\n"))
	a := amtemplate.Alert{Status: "firing", StartsAt: testWindow.Start, Fingerprint: "f",
		Labels: amtemplate.KV{"alertname": "VLLMHighTTFT", "instance": "h:1", "model_name": "m"}}
	f.Fuzz(func(t *testing.T, b []byte) {
		start := time.Now()
		defer func() {
			if d := time.Since(start); d > time.Second {
				t.Fatalf("took %s", d)
			}
		}()
		p, err := parseFile("f.yaml", b)
		if err != nil {
			checkPositioned(t, err)
			return
		}
		for _, pb := range p.playbooks {
			plan := pb.Plan(a, testWindow)
			re, err := Rebuild(plan.Stored(), a, testWindow)
			if err != nil {
				t.Fatalf("playbook %s loaded but does not rebuild: %v", pb.Name, err)
			}
			if re.Digest != plan.Digest || len(re.Steps) != len(plan.Steps) {
				t.Fatalf("playbook %s rebuilt as digest %s with %d steps, loaded %s with %d", pb.Name, re.Digest, len(re.Steps), plan.Digest, len(plan.Steps))
			}
			for i := range re.Steps {
				if re.Steps[i].ID != plan.Steps[i].ID {
					t.Fatalf("playbook %s: rebuilt step %d is %s, not %s", pb.Name, i, re.Steps[i].ID, plan.Steps[i].ID)
				}
			}
		}
	})
}

func checkPositioned(t *testing.T, err error) {
	t.Helper()
	var list yamlerr.List
	var one *yamlerr.Error
	switch {
	case errors.As(err, &list):
	case errors.As(err, &one):
		list = yamlerr.List{one}
	default:
		t.Fatalf("error %T %q is not a yamlerr", err, err)
	}
	if len(list) == 0 {
		t.Fatal("an empty error list")
	}
	for _, e := range list {
		if e.File != "f.yaml" || e.Line < 1 || e.Col < 1 || e.Msg == "" {
			t.Fatalf("error without a place: %#v", e)
		}
	}
}

// FuzzRender checks template rendering on any template source and label
// values: parsing or rendering may fail, but never panics, returns within a
// bound (no template runs away), and never produces more than maxRender bytes.
//
// Seeds: every template string of the shipped playbooks and testdata.
//
//	go test ./playbooks -run '^$' -fuzz '^FuzzRender$' -fuzztime 60s
func FuzzRender(f *testing.F) {
	for _, b := range seedFiles(f) {
		for _, line := range strings.Split(string(b), "\n") {
			if i := strings.Index(line, "'"); i >= 0 && strings.Contains(line, "{{") {
				if j := strings.LastIndex(line, "'"); j > i {
					f.Add(line[i+1:j], "10.0.0.7:8000", "m")
				}
			}
		}
	}
	f.Add(`{{ range $k, $v := .Labels }}{{ $k }}={{ $v | promQuote }},{{ end }}`, `a"b\`, "\x00")
	f.Add(`{{ .Window.Range }} {{ .Window.StartUnix }} {{ .Vars.v | toUpper }}`, "", "")
	f.Fuzz(func(t *testing.T, src, instance, model string) {
		tp, err := parseTemplate("fuzz", src)
		if err != nil {
			return
		}
		data := NewTemplateData(amtemplate.Alert{Status: "firing", StartsAt: testWindow.Start,
			Labels: amtemplate.KV{"instance": instance, "model_name": model}}, testWindow)
		data.Vars["v"] = instance + model
		start := time.Now()
		out, err := tp.render(data)
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("render of %q took %s", src, d)
		}
		if len(out) > maxRender {
			t.Fatalf("render of %q gave %d bytes, over the %d cap", src, len(out), maxRender)
		}
		if err != nil && out != "" {
			t.Fatalf("render failed (%v) yet returned %q", err, out)
		}
	})
}
