package sourcerules

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// module is the import path every package of ours starts with.
const module = "github.com/autocapture/autocapture"

// aliasAllowed lists the re-exports kept on purpose, by "file: name", each
// with its reason. Empty: add one only when a second name is truly needed.
var aliasAllowed = map[string]string{}

// TestNoReexports: no non-test declaration gives another package's name a
// second name. Flagged: a type alias of any package's type, and a const or
// var whose whole value is a name from another package of this module (a
// standard value such as time.Minute as a default is not a second name).
func TestNoReexports(t *testing.T) {
	for _, sf := range sourceFiles(t, ".") {
		for _, r := range reexports(sf) {
			if _, ok := aliasAllowed[sf.rel+": "+r.name]; ok {
				continue
			}
			t.Errorf("%s:%d: %s re-exports %s: use the defining package's name", sf.rel, r.pos.Line, r.name, r.of)
		}
	}
}

// reexport is one declaration that names another package's name again.
type reexport struct {
	pos      token.Position
	name, of string
}

// reexports finds sf's re-exports (see TestNoReexports).
func reexports(sf sourceFile) []reexport {
	imports := map[string]string{} // local name → import path
	for _, imp := range sf.file.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		name := p[strings.LastIndex(p, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		imports[name] = p
	}
	// qualified reports whether e is pkg.Name of an imported package, and which.
	qualified := func(e ast.Expr) (string, string, bool) {
		if g, ok := e.(*ast.IndexExpr); ok { // a generic type's instance
			e = g.X
		}
		sel, ok := e.(*ast.SelectorExpr)
		if !ok {
			return "", "", false
		}
		x, ok := sel.X.(*ast.Ident)
		if !ok {
			return "", "", false
		}
		path, ok := imports[x.Name]
		return path, x.Name + "." + sel.Sel.Name, ok
	}
	var out []reexport
	for _, d := range sf.file.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, s := range g.Specs {
			switch s := s.(type) {
			case *ast.TypeSpec:
				if !s.Assign.IsValid() {
					continue
				}
				if _, of, ok := qualified(s.Type); ok {
					out = append(out, reexport{sf.fset.Position(s.Pos()), s.Name.Name, of})
				}
			case *ast.ValueSpec:
				if len(s.Values) != len(s.Names) {
					continue
				}
				for i, v := range s.Values {
					path, of, ok := qualified(v)
					if !ok || s.Names[i].Name == "_" {
						continue
					}
					if path == module || strings.HasPrefix(path, module+"/") {
						out = append(out, reexport{sf.fset.Position(s.Names[i].Pos()), s.Names[i].Name, of})
					}
				}
			}
		}
	}
	return out
}

// TestReexportsFound: the check flags each re-export form and nothing else.
func TestReexportsFound(t *testing.T) {
	const src = `package p

import (
	"time"

	"github.com/autocapture/autocapture/vocab"
	st "github.com/autocapture/autocapture/storage"
	"github.com/prometheus/alertmanager/template"
)

type Store = vocab.Store          // flagged
type Alert = template.Alert       // flagged: any package's type
type list = st.Generic[int]       // flagged: an instance
type Own vocab.Status             // a new type, not an alias
type local = struct{ A int }      // no package

const Done = vocab.StatusSucceeded // flagged
const (
	queued = vocab.StatusQueued     // flagged, unexported too
	wait   = time.Minute            // a standard value as a default
	both   = vocab.StatusQueued + "x" // an expression
)

var ErrX = st.ErrNotFound         // flagged
var _ = vocab.StatusFailed         // blank
var now = time.Now                 // a standard function as a seam
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range reexports(sourceFile{rel: "p.go", fset: fset, file: f}) {
		got = append(got, r.name+"="+r.of)
	}
	want := []string{"Store=vocab.Store", "Alert=template.Alert", "list=st.Generic", "Done=vocab.StatusSucceeded",
		"queued=vocab.StatusQueued", "ErrX=st.ErrNotFound"}
	if !slices.Equal(got, want) {
		t.Errorf("flagged %q\nwant    %q", got, want)
	}
}
