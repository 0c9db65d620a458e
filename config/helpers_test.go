package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// parseErrCase is a config that must be refused with an error containing
// every want.
type parseErrCase struct {
	name, yaml string
	want       []string
}

// checkParseErrors parses each case as c.yaml and fails unless it is refused
// with an error holding every want; more, when set, checks the error further.
func checkParseErrors(t *testing.T, cases []parseErrCase, more func(t *testing.T, err error)) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("c.yaml", []byte(c.yaml))
			if err == nil {
				t.Fatal("loaded, want an error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v\nwant it to contain %q", err, w)
				}
			}
			if more != nil {
				more(t, err)
			}
		})
	}
}

// writeFile writes content to dir/name and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
