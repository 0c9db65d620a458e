package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/autocapture/autocapture/capture"
	"github.com/autocapture/autocapture/vocab"
)

// cliData holds the playbook files these tests use (playbooks/testdata/cli).
const cliData = "../../playbooks/testdata/cli/"

type clpromConfig struct {
	Query string `yaml:"query"`
}

type clStep struct{ summary string }

func (s clStep) Run(_ context.Context, in *vocab.Input) (*vocab.Result, error) {
	if s.summary != "" {
		return &vocab.Result{Summary: s.summary}, nil
	}
	id := vocab.VerdictUnexplained
	for _, r := range in.Prior {
		if r.Signals[vocab.SigKVUsage] >= 0.95 {
			id = vocab.VerdictKVPressure
		}
	}
	return &vocab.Result{Summary: id, Verdict: &vocab.Verdict{ID: id}}, nil
}

func init() {
	capture.Register(vocab.Kind{Name: "clprom", Tier: vocab.TierMetrics,
		Config: func() any { return &clpromConfig{} },
		Build:  func(c any) (vocab.Step, error) { return clStep{summary: c.(*clpromConfig).Query}, nil }})
	capture.Register(vocab.Kind{Name: "cljudge", Tier: vocab.TierTriage,
		Config: func() any { return &struct{}{} },
		Build:  func(any) (vocab.Step, error) { return clStep{}, nil }})
}

// cli runs one command line through the dispatcher, as main does.
func cli(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = dispatch(args, &o, &e)
	return code, o.String(), e.String()
}

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	goodCfg := filepath.Join(dir, "good.yaml")
	os.WriteFile(goodCfg, []byte(fmt.Sprintf("playbooks: [%q]\nshipped_playbooks: false\n", cliData+"a-*.yaml")), 0o644)
	badCfg := filepath.Join(dir, "bad.yaml")
	os.WriteFile(badCfg, []byte("runs:\n  max_concurent: 3\n"), 0o644)
	// Alert labels must not pick an http step's host, path or query shape.
	labelURL := filepath.Join(dir, "label-url.yaml")
	os.WriteFile(labelURL, []byte("playbooks:\n  - name: p\n    match: ['alertname=\"A\"']\n    steps:\n"+
		"      - id: v\n        http: {url: \"http://{{ .Labels.instance }}/version\"}\n"), 0o644)
	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		stdout   string
		stderr   []string
		stderrNo int
	}{
		// A file given is checked over the shipped set, as serve runs it.
		{"good file", []string{"check", cliData + "a-good.yaml"}, 0,
			"ok: 11 playbooks: 1 from files, 10 shipped (93 steps, 2 tests) in 13 files\n", nil, 0},
		{"config globs", []string{"check", "--config.file", goodCfg}, 0,
			"ok: 1 playbooks (3 steps, 2 tests) in 1 files, config " + goodCfg + " ok\n", nil, 0},
		{"bad file lists every error with its position", []string{"check", cliData + "b-bad.yaml"}, 1, "", []string{
			cliData + `b-bad.yaml:3:13: bad matcher "severity=~\"page"`,
			cliData + `b-bad.yaml:6:29: unknown field "querry"`,
			cliData + `b-bad.yaml:11:9: step "b": unknown step kind "nosuchkind" (known: `,
			cliData + `b-bad.yaml:8:21: when: no step "c" in playbook`,
		}, 4},
		{"bad config", []string{"check", "--config.file", badCfg}, 1, "", []string{badCfg + `:2:3: unknown field "max_concurent"`}, 1},
		{"http url from labels", []string{"check", labelURL}, 1, "", []string{labelURL + ":6:"}, 1},
		{"missing file", []string{"check", filepath.Join(dir, "nope.yaml")}, 1, "", []string{"no such file"}, 1},
		{"bad flag", []string{"check", "--nope"}, 2, "", []string{"flag provided but not defined"}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := cli(tc.args...)
			if code != tc.code || out != tc.stdout {
				t.Errorf("exit %d, stdout %q; want %d, %q\nstderr:\n%s", code, out, tc.code, tc.stdout, errOut)
			}
			for _, want := range tc.stderr {
				if !strings.Contains(errOut, want) {
					t.Errorf("stderr lacks %q:\n%s", want, errOut)
				}
			}
			if lines := strings.Count(errOut, "\n"); tc.stderrNo >= 0 && lines != tc.stderrNo {
				t.Errorf("stderr has %d lines, want %d:\n%s", lines, tc.stderrNo, errOut)
			}
		})
	}
}

// TestCheckSaysWhereThePlaybooksCameFrom: a config's playbook files keep the
// shipped set under them, and check says how many came from each; a file's
// playbook named as a shipped one is said to replace it.
func TestCheckSaysWhereThePlaybooksCameFrom(t *testing.T) {
	dir := t.TempDir()
	pb := filepath.Join(dir, "itl.yaml")
	os.WriteFile(pb, []byte("playbooks:\n  - name: vllm-high-itl\n    match: ['alertname=\"VLLMHighITL\"']\n    steps:\n"+
		"      - id: v\n        http: {path: /version}\n"), 0o644)
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("playbooks: [%q]\n", pb)), 0o644)
	code, out, errOut := cli("check", "--config.file", cfg)
	if want := "ok: 10 playbooks: 1 from files, 9 shipped (replaced by a file's: vllm-high-itl) ("; code != 0 || !strings.HasPrefix(out, want) {
		t.Errorf("check: exit %d, stdout %q, stderr %q; want 0 and %q…", code, out, errOut, want)
	}
	// A file that uses a shipped preset checks by its path as it runs.
	uses := filepath.Join(dir, "uses.yaml")
	os.WriteFile(uses, []byte("playbooks:\n  - name: mine\n    match: ['alertname=\"Mine\"']\n    steps:\n      - use: vllm-triage\n"), 0o644)
	if code, out, errOut := cli("check", uses); code != 0 || !strings.HasPrefix(out, "ok: 11 playbooks: 1 from files, 10 shipped") {
		t.Errorf("check %s: exit %d, stdout %q, stderr %q", uses, code, out, errOut)
	}
	code, out, _ = cli("check")
	if code != 0 || !strings.HasPrefix(out, "ok: 10 shipped playbooks (") {
		t.Errorf("check with no config: exit %d, %q", code, out)
	}
	os.WriteFile(cfg, []byte("shipped_playbooks: false\n"), 0o644)
	if code, _, errOut := cli("check", "--config.file", cfg); code != 1 || !strings.Contains(errOut, cfg+":1:20: shipped_playbooks: false with no playbooks: files") {
		t.Errorf("the shipped set off and no files: exit %d, stderr %q", code, errOut)
	}
}

// TestCheckReportsPlaybooksPastConfigErrors: a config with mistakes still
// has its playbooks checked, so one run of check lists every problem of both,
// each at its file:line:col in words that say what to do.
func TestCheckReportsPlaybooksPastConfigErrors(t *testing.T) {
	dir := t.TempDir()
	pb := filepath.Join(dir, "pb4.yaml")
	os.WriteFile(pb, []byte("playbooks:\n  - name: p\n    match: ['alertname=\"A\"']\n    cooldown: 2 s\n    steps:\n"+
		"      - id: c\n        clprom: {query: up, gap: 1s}\n"), 0o644)
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("web:\n  listen_adress: 127.0.0.1:1\nplaybooks: [%q]\nshipped_playbooks: false\n", pb)), 0o644)
	code, out, errOut := cli("check", "--config.file", cfg)
	want := cfg + `:2:3: unknown field "listen_adress" in web: did you mean "listen_address"?` + "\n" +
		pb + `:4:15: playbook.cooldown: want a duration such as 20s, 500ms or 1m30s, got "2 s"` + "\n" +
		pb + `:7:29: unknown field "gap" in clprom: want one of query` + "\n"
	if code != 1 || out != "" || errOut != want {
		t.Fatalf("exit %d, stdout %q, stderr\n%s\nwant\n%s", code, out, errOut, want)
	}
	// A config whose playbooks: itself is refused checks no guessed files.
	os.WriteFile(cfg, []byte("playbooks: {a: 1}\n"), 0o644)
	if code, _, errOut := cli("check", "--config.file", cfg); code != 1 || strings.Contains(errOut, pb) ||
		!strings.Contains(errOut, cfg+":1:12: playbooks: want a list") {
		t.Fatalf("refused playbooks: exit %d, stderr %q", code, errOut)
	}
}
