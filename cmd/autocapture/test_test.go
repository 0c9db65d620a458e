package main

import (
	"strings"
	"testing"
)

func TestTestCommand(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		out  []string
	}{
		{"reports each case with file and line", []string{"test", cliData + "a-good.yaml"}, 1, []string{
			"ok    " + cliData + "a-good.yaml:17: kv pressure\n",
			"FAIL  " + cliData + "a-good.yaml:26: wrong on purpose\n        verdict unexplained, want kv-pressure",
			"1 passed, 1 failed\n",
		}},
		{"--run selects cases", []string{"test", "--run", "^kv", cliData + "a-good.yaml"}, 0, []string{"1 passed, 0 failed\n"}},
		{"-v prints step statuses", []string{"test", "-v", "--run", "^kv", cliData + "a-good.yaml"}, 0, []string{
			"kv/deep: skipped: when: steps.triage.verdict == \"unexplained\" is false"}},
		{"a broken file is reported, not run", []string{"test", cliData + "b-bad.yaml"}, 1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := cli(tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, out, errOut)
			}
			for _, want := range tc.out {
				if !strings.Contains(out, want) {
					t.Errorf("stdout lacks %q:\n%s", want, out)
				}
			}
		})
	}
}
