package runner

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// serviceWiring is every method *Service may have: starting and stopping the
// parts, handing them out, and one-line forwards to the lifecycle for the
// API (issue 23: "runner.Service has ≤ 8 fields and no method that is not
// wiring"). Logic belongs in a part; a new method here must be a forward.
var serviceWiring = []string{
	// start, stop, hand out
	"Start", "Stop", "Close", "Ping", "Profiling", "Signer", "compose",
	// forwards to lifecycle.Runs for the handlers
	"Accept", "Get", "List", "Cancel", "Feedback", "RunArtifact", "QueueStats",
	"OutboxBacklog", "OrphanedRunJobs",
	// hands out the thread's actions (lifecycle.Runs.Actions)
	"Actions",
}

// TestServiceIsWiring holds runner.Service to a composition root: at most 8
// fields, and no method beyond serviceWiring, so the run lifecycle and the
// parts cannot grow back into it.
func TestServiceIsWiring(t *testing.T) {
	typ := reflect.TypeFor[Service]()
	if n := typ.NumField(); n > 8 {
		var names []string
		for i := range n {
			names = append(names, typ.Field(i).Name)
		}
		t.Errorf("Service has %d fields, want ≤ 8 (a composition root holds one per part): %v", n, names)
	}
	ptr := reflect.TypeFor[*Service]()
	for i := range ptr.NumMethod() { // exported methods
		if m := ptr.Method(i).Name; !slices.Contains(serviceWiring, m) {
			t.Errorf("Service.%s is not wiring: move it into the part it belongs to (or, for a one-line forward, list it in serviceWiring)", m)
		}
	}
	// Unexported methods are not in reflect's method set: count them in the source.
	for _, m := range unexportedMethods(t, "Service") {
		if !slices.Contains(serviceWiring, m) {
			t.Errorf("Service.%s is not wiring: move it into the part it belongs to", m)
		}
	}
}

// unexportedMethods lists the unexported methods declared on typ (or *typ)
// in this package's production files.
func unexportedMethods(t *testing.T, typ string) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || len(fn.Recv.List) != 1 || fn.Name.IsExported() {
				continue
			}
			rt := fn.Recv.List[0].Type
			if st, ok := rt.(*ast.StarExpr); ok {
				rt = st.X
			}
			if id, ok := rt.(*ast.Ident); ok && id.Name == typ {
				out = append(out, fn.Name.Name)
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no unexported method of %s found: the parse is broken (compose is one)", typ)
	}
	return out
}
