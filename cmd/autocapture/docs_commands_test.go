package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docsTestCommand is a `go test ./pkg ... -run 'Names'` in the docs.
var docsTestCommand = regexp.MustCompile("go test (?:-[a-z]+(?:=\\S+)? )*(\\./[\\w/.-]+)[^`|]*?-run '?\\^?([\\w|]+)")

// TestDocsTestCommandsExist: every `go test ./pkg -run Name` the README and
// docs/ give names a test or benchmark that pkg has (Name a prefix of it, as
// -run matches), so a test moved to another package takes its command along.
func TestDocsTestCommandsExist(t *testing.T) {
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{readmeFile}, files...)
	checked := 0
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range docsTestCommand.FindAllStringSubmatch(string(raw), -1) {
			pkg := filepath.Join("../..", m[1])
			for _, name := range strings.Split(m[2], "|") {
				if !strings.HasPrefix(name, "Test") && !strings.HasPrefix(name, "Benchmark") {
					continue // a subtest's or a pattern's part
				}
				checked++
				if !packageHasFunc(t, pkg, name) {
					t.Errorf("%s: `go test %s -run %s`: %s has no test or benchmark %s…", strings.TrimPrefix(f, "../../"), m[1], name, m[1], name)
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("checked %d commands: the pattern no longer reads the docs", checked)
	}
}

// packageHasFunc says whether a _test.go file in dir declares a function
// whose name starts with prefix.
func packageHasFunc(t *testing.T, dir, prefix string) bool {
	t.Helper()
	tests, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	decl := regexp.MustCompile(`(?m)^func ` + regexp.QuoteMeta(prefix))
	for _, f := range tests {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if decl.Match(raw) {
			return true
		}
	}
	return false
}
