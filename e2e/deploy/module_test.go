package deploy

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// product is the root module, whose packages these tests import.
const product = "github.com/autocapture/autocapture"

// TestModuleBuildsTheProductAsTheRootDoes: this folder is a module of its own
// (its go.mod holds the manifest checkers' dependencies), so what it links
// could drift from what ships. Both go.mod files name the same Go, and every
// module that the product's packages imported here link is at the version the
// root module selects, so the config, playbooks and rules checked here are
// read by the code the binary runs.
func TestModuleBuildsTheProductAsTheRootDoes(t *testing.T) {
	parallel(t)
	self := filepath.Join(repoRoot, "e2e", "deploy")
	if got, want := goModVersion(t, self), goModVersion(t, repoRoot); got != want {
		t.Errorf("e2e/deploy/go.mod says go %s, the root's go.mod go %s", got, want)
	}
	ours := strings.Fields(goList(t, self, "-deps", "-test", "-f",
		`{{if .Module}}{{if eq .Module.Path "`+product+`"}}{{.ImportPath}}{{end}}{{end}}`, "."))
	if len(ours) < 5 {
		t.Fatalf("the tests here link %d packages of the product (%q): go list changed?", len(ours), ours)
	}
	const format = `{{with .Module}}{{.Path}} {{.Version}}{{with .Replace}} => {{.Path}} {{.Version}}{{end}}{{end}}`
	here := modules(goList(t, self, append([]string{"-deps", "-f", format}, ours...)...))
	root := modules(goList(t, repoRoot, append([]string{"-deps", "-f", format}, ours...)...))
	if len(root) < 10 {
		t.Fatalf("the product's packages imported here link %d modules: go list changed?", len(root))
	}
	for path, want := range root {
		if got := here[path]; path != product && got != want {
			t.Errorf("%s: %s here, %s in the root module: e2e/deploy/go.mod must select what the root does",
				path, got, want)
		}
	}
}

// goList runs `go list args...` in dir and returns its output.
func goList(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list %s in %s: %v\n%s", strings.Join(args, " "), dir, err, ee.Stderr)
		}
		t.Fatalf("go list in %s: %v", dir, err)
	}
	return string(out)
}

// modules maps each "path version[ => replacement]" line of out to what
// follows the path.
func modules(out string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if path, version, ok := strings.Cut(line, " "); ok {
			m[path] = version
		}
	}
	return m
}
