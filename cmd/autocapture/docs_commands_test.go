package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docsTestCommand is a `go test ./pkg ... -run 'Names'` in the docs, or
// `go -C dir test . ...` for a module of its own (e2e/deploy).
var docsTestCommand = regexp.MustCompile("go (?:-C ([\\w/.-]+) )?test (?:-[a-z]+(?:=\\S+)? )*(\\.(?:/[\\w/.-]+)?)[^`|]*?-run '?\\^?([\\w|]+)")

// TestDocsTestCommandsExist: every `go test ./pkg -run Name` (or `go -C dir
// test ./pkg -run Name`) the README and docs/ give names a test or benchmark
// that pkg has (Name a prefix of it, as -run matches), so a test moved to
// another package takes its command along.
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
			rel := filepath.Join(m[1], m[2])
			if mod := moduleOf(t, rel); mod != filepath.Clean(m[1]) {
				t.Errorf("%s: `%s`: %s is in the module at %s: write `go -C %s test ...`", strings.TrimPrefix(f, "../../"), m[0], rel, mod, mod)
				continue
			}
			pkg := filepath.Join("../..", rel)
			for _, name := range strings.Split(m[3], "|") {
				if !strings.HasPrefix(name, "Test") && !strings.HasPrefix(name, "Benchmark") {
					continue // a subtest's or a pattern's part
				}
				checked++
				if !packageHasFunc(t, pkg, name) {
					t.Errorf("%s: `%s`: %s has no test or benchmark %s…", strings.TrimPrefix(f, "../../"), m[0], rel, name)
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("checked %d commands: the pattern no longer reads the docs", checked)
	}
}

// moduleOf returns the folder, relative to the repository, of the module
// holding the repo-relative folder rel: the nearest go.mod at or above it
// ("." for the root's).
func moduleOf(t *testing.T, rel string) string {
	t.Helper()
	for dir := filepath.Clean(rel); ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join("../..", dir, "go.mod")); err == nil {
			return dir
		} else if !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if dir == "." {
			t.Fatalf("no go.mod at or above %s", rel)
		}
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
