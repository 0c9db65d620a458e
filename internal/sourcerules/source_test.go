package sourcerules

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// root is the module's root, from this package's folder.
const root = "../.."

// sourceFile is one parsed non-test Go file of the module.
type sourceFile struct {
	rel  string // path from the module root
	fset *token.FileSet
	file *ast.File
}

// sourceFiles parses every non-test Go file under dir (relative to the
// module root), comments included, skipping testdata and hidden folders.
func sourceFiles(t *testing.T, dir string) []sourceFile {
	t.Helper()
	fset := token.NewFileSet()
	var out []sourceFile
	base := filepath.Join(root, dir)
	err := filepath.WalkDir(base, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != base && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		out = append(out, sourceFile{rel: filepath.ToSlash(rel), fset: fset, file: f})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("no Go files under %s", base)
	}
	return out
}
