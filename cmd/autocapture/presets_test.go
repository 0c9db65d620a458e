package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
)

// presetData is a playbook (use.yaml) whose snapshot and triage come from a
// preset in another file of its folder (shared.yaml).
const presetData = cliData + "presets/"

// TestCommandsSeePresetSteps: check, test and replay --dry-run all work on the
// expanded steps, and check reports a use: it cannot resolve at file:line:col.
func TestCommandsSeePresetSteps(t *testing.T) {
	t.Run("check counts the expanded steps", func(t *testing.T) {
		code, out, errOut := cli("check", presetData)
		if code != 0 || out != "ok: 11 playbooks: 1 from files, 10 shipped (93 steps, 1 tests) in 14 files\n" { // 90 of the steps are the shipped set's (vLLM's 45, SGLang's 45)
			t.Errorf("exit %d stdout %q\nstderr:\n%s", code, out, errOut)
		}
	})
	t.Run("check of the using file alone names the unknown preset", func(t *testing.T) {
		code, _, errOut := cli("check", presetData+"use.yaml")
		if want := presetData + `use.yaml:7:14: playbook "kv-shared": unknown preset "kv-evidence"`; code != 1 || !strings.Contains(errOut, want) {
			t.Errorf("exit %d, stderr lacks %q:\n%s", code, want, errOut)
		}
	})
	t.Run("test runs the cases over the preset's steps", func(t *testing.T) {
		code, out, errOut := cli("test", "-v", presetData)
		for _, want := range []string{"ok    " + presetData + "use.yaml:13: kv pressure through a preset\n",
			"kv-shared/deep: skipped", "1 passed, 0 failed\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("stdout lacks %q:\n%s", want, out)
			}
		}
		if code != 0 {
			t.Errorf("exit %d\n%s", code, errOut)
		}
	})
	t.Run("replay renders the preset's steps with the playbook's vars", func(t *testing.T) {
		cfg := filepath.Join(t.TempDir(), "c.yaml")
		os.WriteFile(cfg, []byte(fmt.Sprintf("playbooks: [%q]\nruns: {lookback: 5m}\n", presetData+"*.yaml")), 0o644)
		code, out, errOut := cli("replay", "--dry-run", "--config.file", cfg, "--now", "2026-01-01T00:10:00Z", cliData+"payload.json")
		if code != 0 {
			t.Fatalf("exit %d\n%s", code, errOut)
		}
		var got []replayAlert
		if err := yaml.Unmarshal([]byte(out), &got); err != nil || len(got) == 0 || len(got[0].Plans) != 1 {
			t.Fatalf("output %v:\n%s", err, out)
		}
		steps := got[0].Plans[0].Steps
		var ids []string
		for _, st := range steps {
			ids = append(ids, st.ID)
		}
		if strings.Join(ids, ",") != "snapshot,triage,deep" {
			t.Fatalf("steps %v, want snapshot,triage,deep", ids)
		}
		if q := fmt.Sprint(steps[0].Config); !strings.Contains(q, `vllm:kv_cache_usage_perc{instance="127.0.0.1:8000"}[15m]`) || steps[0].Timeout != "5s" {
			t.Errorf("snapshot from the preset: config %s timeout %q", q, steps[0].Timeout)
		}
	})
}
