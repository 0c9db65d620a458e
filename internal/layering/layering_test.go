package layering

import (
	"encoding/json"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

// TestImportsPointDown holds every package of the module to Layers: a
// package imports only packages of a lower layer (a test file may reach
// anything). It reads the import graph from `go list`, so a new package must
// be placed in Layers before it builds here, and an import that runs upward
// names both ends.
func TestImportsPointDown(t *testing.T) {
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports", "../../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const mod = "github.com/autocapture/autocapture/"
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := map[string]bool{}
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		from := strings.TrimPrefix(p.ImportPath, mod)
		seen[from] = true
		lf, ok := layerOf(from)
		if !ok {
			t.Errorf("%s is in no layer: place it in Layers (layering.go)", from)
			continue
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, mod) {
				continue
			}
			to := strings.TrimPrefix(imp, mod)
			lt, ok := layerOf(to)
			if !ok {
				continue // reported as its own package
			}
			if lt >= lf {
				t.Errorf("%s (layer %d, %s) imports %s (layer %d, %s): imports point down only",
					from, lf, Layers[lf].Name, to, lt, Layers[lt].Name)
			}
		}
	}
	var stale []string
	for _, l := range Layers {
		for _, p := range l.Packages {
			if !strings.HasSuffix(p, "/...") && !seen[p] {
				stale = append(stale, p)
			}
		}
	}
	sort.Strings(stale)
	if len(stale) > 0 {
		t.Errorf("Layers names packages that do not exist: %v", stale)
	}
}
