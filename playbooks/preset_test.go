package playbooks

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// sharedFile is a presets-only file (s.yaml): two steps, then one of tier 2.
const sharedFile = `presets:
  - name: evidence
    description: the snapshot and a triage
    steps:
      - id: snap
        tprom:
          queries: [{name: q, query: 'up{ {{- .Vars.sel -}} }'}]
      - id: triage
        ttriage: {}
  - name: deep
    steps:
      - id: deep
        when: 'steps.triage.verdict == "unexplained"'
        ttraces: {limit: 3}
`

// userFile is a playbook (u.yaml) using the presets of sharedFile.
const userFile = `playbooks:
  - name: p
    match: [alertname="A"]
    vars: {sel: 'instance={{ .Labels.instance | promQuote }}'}
    steps:
      - use: evidence
      - id: own
        ttraces: {limit: 1}
      - use: deep
`

// loadDir writes files into a folder and loads it as `check` and `test` do.
func loadDir(t *testing.T, files map[string]string) (*Set, string, error) {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s, err := LoadFiles([]string{dir})
	return s, dir, err
}

func stepIDs(pb *Playbook) string {
	var ids []string
	for _, st := range pb.Steps {
		ids = append(ids, st.ID)
	}
	return strings.Join(ids, ",")
}

// TestPresetsExpandAcrossFiles: a use: names a preset of another file of the
// set; its steps land where the use is, keep their own file and line, and see
// the playbook's vars; a when in a preset reads steps of the playbook.
func TestPresetsExpandAcrossFiles(t *testing.T) {
	s, dir, err := loadDir(t, map[string]string{"s.yaml": sharedFile, "u.yaml": userFile})
	if err != nil {
		t.Fatal(err)
	}
	pb := s.Playbooks[0]
	if got := stepIDs(pb); got != "snap,triage,own,deep" {
		t.Fatalf("steps %s, want snap,triage,own,deep", got)
	}
	if st := pb.Steps[0]; st.Preset != "evidence" || st.File != filepath.Join(dir, "s.yaml") || st.Line != 5 {
		t.Errorf("snap comes from %q %s:%d, want preset evidence at s.yaml:5", st.Preset, st.File, st.Line)
	}
	if st := pb.Steps[2]; st.Preset != "" || st.File != filepath.Join(dir, "u.yaml") {
		t.Errorf("own step: preset %q file %s", st.Preset, st.File)
	}
	plan := pb.Plan(alert("alertname", "A", "instance", "h:1"), testWindow)
	if q := plan.Steps[0].Config.(*tPromConfig).Queries[0].Query; q != `up{instance="h:1"}` {
		t.Errorf("rendered %q", q)
	}
	if plan.Steps[3].When == nil || plan.Steps[3].When.eval == nil {
		t.Fatal("the preset's when is not compiled in the playbook")
	}
	if ok, err := plan.Steps[3].When.Eval(alert(), nil); err != nil || ok {
		t.Errorf("when with no triage: %v %v, want false", ok, err)
	}
}

// TestPresetErrorPositions: every problem of a preset or of a use is reported
// at its file:line:col, naming both places where it takes two.
func TestPresetErrorPositions(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"unknown preset", map[string]string{"s.yaml": sharedFile, "u.yaml": strings.Replace(userFile, "use: deep", "use: depe", 1)},
			`u.yaml:9:14: playbook "p": unknown preset "depe" (known: deep, evidence)`},
		{"parse error in the preset's step keeps its position", map[string]string{"u.yaml": userFile,
			"s.yaml": strings.Replace(sharedFile, "ttraces: {limit: 3}", "ttraces: {limit: 3, limt: 4}", 1)},
			`s.yaml:14:29: unknown field "limt"`},
		{"bad template in a preset", map[string]string{"u.yaml": userFile,
			"s.yaml": strings.Replace(sharedFile, "{{- .Vars.sel -}}", "{{ .Vars.sel", 1)},
			`s.yaml:7:38: step "snap": template:`},
		{"duplicate step id after expansion names both places", map[string]string{"s.yaml": sharedFile,
			"u.yaml": strings.Replace(userFile, "id: own", "id: snap", 1)},
			`u.yaml:7:13: duplicate step id "snap": step of preset "evidence" (` + "DIR" + `s.yaml:5) used at line 6, and step at line 7`},
		{"a preset used twice", map[string]string{"s.yaml": sharedFile, "u.yaml": userFile + "      - use: evidence\n"},
			`u.yaml:10:14: duplicate step id "snap": step of preset "evidence" (DIRs.yaml:5) used at line 6, and step of preset "evidence" (DIRs.yaml:5) used at line 10`},
		{"when of a preset reads a step the playbook lacks", map[string]string{"s.yaml": sharedFile,
			"u.yaml": strings.Replace(userFile, "      - use: evidence\n", "", 1)},
			`s.yaml:13:22: when: no step "triage" in playbook (in playbook "p", which uses preset "deep" at DIRu.yaml:8:14)`},
		{"syntax error in a preset's when, reported once where it is written", map[string]string{"s.yaml": strings.Replace(sharedFile, `== "unexplained"'`, `=='`, 1), "u.yaml": userFile},
			`s.yaml:13:38: when: unexpected token EOF`},
		{"use inside a preset", map[string]string{"s.yaml": sharedFile + "  - name: nested\n    steps:\n      - use: deep\n"},
			`s.yaml:17:9: preset "nested": a preset's steps are plain steps`},
		{"duplicate preset across files", map[string]string{"s.yaml": sharedFile, "t.yaml": "presets:\n  - name: deep\n    steps: [{id: x, ttriage: {}}]\n"},
			`t.yaml:2:5: duplicate preset name "deep" (first at DIRs.yaml:10)`},
		{"use takes no step fields", map[string]string{"s.yaml": sharedFile, "u.yaml": strings.Replace(userFile, "use: deep", "use: deep\n        timeout: 1s", 1)},
			`u.yaml:10:9: unknown field "timeout"`},
		{"bad with template", map[string]string{"s.yaml": sharedFile, "u.yaml": strings.Replace(userFile, "use: deep", "use: deep\n        with: {x: '{{ .Labels.a'}", 1)},
			`u.yaml:10:19: with.x: template:`},
		{"bad preset name", map[string]string{"s.yaml": "presets:\n  - name: 'a b'\n    steps: [{id: x, ttriage: {}}]\n"},
			`s.yaml:2:11: preset: name "a b"`},
		{"preset without steps", map[string]string{"s.yaml": "presets:\n  - name: a\n"},
			`s.yaml:2:5: preset "a": steps: at least one step is required`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, dir, err := loadDir(t, tc.files)
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			want := dir + "/" + strings.ReplaceAll(tc.want, "DIR", dir+"/")
			if !strings.Contains(err.Error(), want) {
				t.Errorf("got  %v\nwant %s", err, want)
			}
			if n := strings.Count(err.Error(), dir+"/"+tc.want[:strings.Index(tc.want, ": ")+2]); n != 1 && !strings.Contains(tc.name, "twice") {
				t.Errorf("reported %d times at that place, want once:\n%v", n, err)
			}
		})
	}
}

// TestUnknownPresetNotReportedWhenAFileFailed: a file that does not parse may be
// the one defining the preset, so only its own error is reported.
func TestUnknownPresetNotReportedWhenAFileFailed(t *testing.T) {
	_, _, err := loadDir(t, map[string]string{"s.yaml": "presets: [\n", "u.yaml": userFile})
	if err == nil || strings.Contains(err.Error(), "unknown preset") || !strings.Contains(err.Error(), "s.yaml:") {
		t.Fatalf("got %v, want only s.yaml's syntax error", err)
	}
}

// TestWithVarsOverrideForOneUse: with: vars are seen by that use's steps only,
// on top of the playbook's vars; one that fails fails those steps, naming it.
func TestWithVarsOverrideForOneUse(t *testing.T) {
	user := `playbooks:
  - name: p
    vars: {sel: 'instance={{ .Labels.instance | promQuote }}'}
    steps:
      - use: evidence
        with: {sel: 'model={{ .Labels.model | promQuote }}', unused: '{{ .Vars.sel }}'}
      - id: own
        tprom:
          queries: [{name: q, query: 'own{ {{- .Vars.sel -}} }'}]
`
	s, _, err := loadDir(t, map[string]string{"s.yaml": sharedFile, "u.yaml": user})
	if err != nil {
		t.Fatal(err)
	}
	pb := s.Playbooks[0]
	plan := pb.Plan(alert("instance", "h:1", "model", "m"), testWindow)
	if q := plan.Steps[0].Config.(*tPromConfig).Queries[0].Query; q != `up{model="m"}` {
		t.Errorf("preset step rendered %q, want the with: selector", q)
	}
	if q := plan.Steps[2].Config.(*tPromConfig).Queries[0].Query; q != `own{instance="h:1"}` {
		t.Errorf("own step rendered %q, want the playbook's selector", q)
	}
	plan = pb.Plan(alert("instance", "h:1"), testWindow)
	if e := plan.Steps[0].RenderErr; e == nil || !strings.Contains(e.Error(), "because with.sel: ") {
		t.Errorf("preset step without its with: var: %v", e)
	}
	if plan.Steps[1].RenderErr != nil || plan.Steps[2].RenderErr != nil {
		t.Errorf("steps not reading the failed var: %v, %v", plan.Steps[1].RenderErr, plan.Steps[2].RenderErr)
	}
}

// TestPresetChangesTheDigestAndResumeRebuildsTheOldSteps: the stored plan of a
// playbook carries the presets it uses, so its digest changes with them (and
// not with a preset it does not use), and a run resumed after the preset file
// was edited rebuilds the steps it started with.
func TestPresetChangesTheDigestAndResumeRebuildsTheOldSteps(t *testing.T) {
	s1, _, err := loadDir(t, map[string]string{"s.yaml": sharedFile, "u.yaml": userFile})
	if err != nil {
		t.Fatal(err)
	}
	a := alert("alertname", "A", "instance", "h:1")
	plans, _ := s1.Plan(a, testWindow)
	stored := plans[0].Stored()

	edited := strings.Replace(sharedFile, "ttraces: {limit: 3}", "ttraces: {limit: 7}", 1)
	s2, _, err := loadDir(t, map[string]string{"s.yaml": edited, "u.yaml": userFile})
	if err != nil {
		t.Fatal(err)
	}
	if s2.Playbooks[0].Digest == stored.Digest {
		t.Error("editing a used preset kept the digest")
	}
	unused := sharedFile + "  - name: other\n    steps: [{id: x, ttriage: {}}]\n"
	s3, _, err := loadDir(t, map[string]string{"s.yaml": unused, "u.yaml": userFile})
	if err != nil {
		t.Fatal(err)
	}
	if s3.Playbooks[0].Digest != stored.Digest {
		t.Error("adding a preset the playbook does not use changed its digest")
	}

	re, err := s2.Rebuild(stored, a, testWindow)
	if err != nil {
		t.Fatal(err)
	}
	if re.Digest != stored.Digest || len(re.Steps) != 4 {
		t.Fatalf("rebuilt digest %s steps %d", re.Digest, len(re.Steps))
	}
	if l := re.Steps[3].Config.(*tTracesConfig).Limit; l != 3 {
		t.Errorf("resumed run rebuilt limit %d, want the 3 it started with", l)
	}
	if q := re.Steps[0].Config.(*tPromConfig).Queries[0].Query; q != `up{instance="h:1"}` {
		t.Errorf("rebuilt snapshot %q", q)
	}
}

// TestSourceMustRebuildTheSamePlaybook: a playbook that cannot come back from
// its own text (here a whole file in flow style, which the line cut cannot
// split) is a load error, not a resume that fails later; one flow item per
// line still cuts.
func TestSourceMustRebuildTheSamePlaybook(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"flow style on one line", "playbooks: [{name: a, steps: [{id: t, ttriage: {}}]}]\n",
			`t.yaml:1:14: playbook "a" cannot be rebuilt from its own text, as a resumed run must: `},
		{"two playbooks on one line", "playbooks:\n  - {name: a, steps: [{id: t, ttriage: {}}]}\n",
			""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseFile("t.yaml", []byte(tc.src))
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %s", err, tc.want)
			}
		})
	}
}

// TestReloadKeepsLastGoodSetWhenAPresetBreaks: the reloader refuses a set whose
// preset no longer parses, and keeps planning with the previous one.
func TestReloadKeepsLastGoodSetWhenAPresetBreaks(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "s.yaml"), sharedFile)
	writeFile(t, filepath.Join(dir, "u.yaml"), userFile)
	r, err := NewReloader(Sources{Globs: []string{filepath.Join(dir, "*.yaml")}}, zap.NewNop(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "s.yaml"), strings.Replace(sharedFile, "limit: 3", "limit: -1", 1))
	if err := r.Reload(); err == nil || !strings.Contains(err.Error(), "s.yaml:14:19: step \"deep\": ttraces: limit must not be negative") {
		t.Fatalf("reload: %v", err)
	}
	plans, _ := r.Plan(alert("alertname", "A", "instance", "h:1"), testWindow)
	if len(plans) != 1 || plans[0].Steps[3].Config.(*tTracesConfig).Limit != 3 {
		t.Fatalf("after a broken preset the set changed: %+v", plans)
	}
	writeFile(t, filepath.Join(dir, "s.yaml"), strings.Replace(sharedFile, "limit: 3", "limit: 5", 1))
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	plans, _ = r.Plan(alert("alertname", "A", "instance", "h:1"), testWindow)
	if plans[0].Steps[3].Config.(*tTracesConfig).Limit != 5 {
		t.Error("the fixed preset was not loaded")
	}
}
