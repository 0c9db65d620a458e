package layering

import (
	"os"
	"regexp"
	"testing"
)

// manifestModule is a requirement on a module whose types only e2e/deploy's
// checks of the manifests read.
var manifestModule = regexp.MustCompile(`(?m)^\s*(?:require\s+)?((?:k8s\.io|sigs\.k8s\.io|github\.com/moby/buildkit|github\.com/moby/patternmatcher|github\.com/compose-spec|github\.com/prometheus-operator)/\S*)`)

// TestManifestTypesStayInTheirModule: the product's go.mod requires none of
// the modules the manifests' checks read; those live in e2e/deploy/go.mod, so
// `go test ./...` and `go vet ./...` here never build them. A package of this
// module that imports one brings them back into every build of ./....
func TestManifestTypesStayInTheirModule(t *testing.T) {
	root, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range manifestModule.FindAllStringSubmatch(string(root), -1) {
		t.Errorf("go.mod requires %s: only e2e/deploy's tests read it; import it there", m[1])
	}
	deploy, err := os.ReadFile("../../e2e/deploy/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(manifestModule.FindAllString(string(deploy), -1)); n < 5 {
		t.Errorf("e2e/deploy/go.mod: the pattern finds %d of the manifests' modules: it no longer reads go.mod", n)
	}
}
