package layering

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// sqlText is a string literal that reads as an SQL statement.
var sqlText = regexp.MustCompile(`(?is)^\s*(SELECT|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|CREATE\s+(TABLE|INDEX|UNIQUE)|ALTER\s+TABLE|DROP\s+(TABLE|INDEX)|WITH\s+\w+\s+AS)\b`)

// sqlCall is a method that runs a statement.
var sqlCall = map[string]bool{"ExecContext": true, "QueryContext": true, "QueryRowContext": true,
	"Exec": true, "Query": true, "QueryRow": true}

// TestSQLOnlyInTheStore: no production file outside database/ holds an SQL
// statement or runs one (issue 23: one store layer). Tests may set up and
// inspect rows themselves.
func TestSQLOnlyInTheStore(t *testing.T) {
	root := "../.."
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == "database" || rel != "." && strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || rel == "internal/testkit" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BasicLit:
				if n.Kind != token.STRING {
					return true
				}
				if s, err := strconv.Unquote(n.Value); err == nil && sqlText.MatchString(s) {
					t.Errorf("%s: an SQL statement outside database/: %.60q", fset.Position(n.Pos()), s)
				}
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sqlCall[sel.Sel.Name] && isDatabaseCall(f) {
					t.Errorf("%s: %s runs a statement outside database/", fset.Position(n.Pos()), sel.Sel.Name)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// isDatabaseCall: the file imports database/sql, so an Exec/Query call in it
// is a statement (elsewhere those names are other things: a template, a
// Prometheus query).
func isDatabaseCall(f *ast.File) bool {
	for _, imp := range f.Imports {
		if imp.Path.Value == `"database/sql"` {
			return true
		}
	}
	return false
}
