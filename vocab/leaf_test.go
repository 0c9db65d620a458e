package vocab_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/autocapture/autocapture"

// goList runs `go list` in the module with args; a missing go command fails
// the test (it runs under `go test`, so one is always there in CI).
func goList(t *testing.T, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatalf("no go command on PATH: %v", err)
	}
	out, err := exec.Command("go", append([]string{"list"}, args...)...).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list %v: %v\n%s", args, err, ee.Stderr)
		}
		t.Fatalf("go list %v: %v", args, err)
	}
	return string(out)
}

// TestVocabIsALeaf: vocab imports no package of ours, directly or through a
// third-party one, so every package may import it without a cycle.
func TestVocabIsALeaf(t *testing.T) {
	deps := goList(t, "-deps", "-f", "{{.ImportPath}}", module+"/vocab")
	for _, d := range strings.Fields(deps) {
		if d != module+"/vocab" && (d == module || strings.HasPrefix(d, module+"/")) {
			t.Errorf("vocab depends on %s: it may import only the standard library and third-party packages", d)
		}
	}
}

// captureAPI is what a package outside capture may name in capture (see the
// package doc): the registry, and a step kind's own API.
var (
	captureRegistry = map[string]bool{"Kind": true, "Register": true, "Lookup": true, "Kinds": true}
	captureKindAPI  = map[string]bool{}
	kindConfigOrNew = regexp.MustCompile(`^([A-Z][A-Za-z0-9]*Config|New[A-Z][A-Za-z0-9]*)$`)
)

// TestOutsideCaptureOnlyTheRegistryAndKindAPI: no package outside capture/
// (its tests included) names a shared word through capture; those are vocab's.
func TestOutsideCaptureOnlyTheRegistryAndKindAPI(t *testing.T) {
	capturePath := module + "/capture"
	list := goList(t, "-f", "{{.ImportPath}}\t{{.Dir}}\t{{join .GoFiles \" \"}} {{join .TestGoFiles \" \"}} {{join .XTestGoFiles \" \"}}", module+"/...")
	var files []string
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		parts := strings.SplitN(line, "\t", 3)
		if len(parts) != 3 {
			t.Fatalf("go list line %q", line)
		}
		pkg, dir := parts[0], parts[1]
		if pkg == capturePath || strings.HasPrefix(pkg, capturePath+"/") {
			continue
		}
		for _, name := range strings.Fields(parts[2]) {
			files = append(files, filepath.Join(dir, name))
		}
	}
	// e2e/deploy is a module of its own, which go list here does not reach
	// (listing it there would load the manifest checkers' dependencies).
	deploy, err := filepath.Glob("../e2e/deploy/*.go")
	if err != nil || len(deploy) == 0 {
		t.Fatalf("e2e/deploy's Go files: %v (found %d)", err, len(deploy))
	}
	files = append(files, deploy...)
	fset := token.NewFileSet()
	checked := 0
	for _, path := range files {
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		local := ""
		for _, is := range f.Imports {
			if p, _ := strconv.Unquote(is.Path.Value); p == capturePath {
				local = "capture"
				if is.Name != nil {
					local = is.Name.Name
				}
			}
		}
		if local == "" || local == "_" {
			continue
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); !ok || id.Name != local {
				return true
			}
			x := sel.Sel.Name
			if !captureRegistry[x] && !captureKindAPI[x] && !kindConfigOrNew.MatchString(x) {
				t.Errorf("%s: capture.%s: outside capture, import capture only for its registry "+
					"(Kind, Register, Lookup, Kinds) and a kind's own API; a word the daemon shares belongs in vocab",
					fset.Position(sel.Pos()), x)
			}
			return true
		})
	}
	if checked == 0 {
		t.Fatal("no file outside capture imports capture: the check saw nothing (go list changed?)")
	}
}
