package sourcerules

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path"
	"regexp"
	"strings"
	"testing"
)

// maxCommentLines is the longest comment block outside a doc.go: past it a
// comment is a specification or a history, which belong in docs/ and in
// commit messages.
const maxCommentLines = 25

// testName is a test function's name as a comment would quote it.
var testName = regexp.MustCompile(`\bTest[A-Z]\w+`)

// TestCommentsSayWhy: outside doc.go no comment block runs past
// maxCommentLines, and no comment outside a test names a test function
// (TestMain, Go's hook, and types of ours named Test… are not tests).
func TestCommentsSayWhy(t *testing.T) {
	files := sourceFiles(t, ".")
	declared := map[string]bool{"TestMain": true}
	for _, sf := range files {
		for _, d := range sf.file.Decls {
			if g, ok := d.(*ast.GenDecl); ok {
				for _, s := range g.Specs {
					if ts, ok := s.(*ast.TypeSpec); ok {
						declared[ts.Name.Name] = true
					}
				}
			}
		}
	}
	for _, sf := range files {
		for _, p := range commentProblems(sf, declared) {
			t.Error(p)
		}
	}
}

// commentProblems lists what is wrong with sf's comments.
func commentProblems(sf sourceFile, declared map[string]bool) []string {
	var out []string
	for _, g := range sf.file.Comments {
		from, to := sf.fset.Position(g.Pos()).Line, sf.fset.Position(g.End()).Line
		if n := to - from + 1; n > maxCommentLines && path.Base(sf.rel) != "doc.go" {
			out = append(out, fmt.Sprintf("%s:%d: a comment block of %d lines (at most %d outside doc.go): keep the why, move the rest",
				sf.rel, from, n, maxCommentLines))
		}
		for _, c := range g.List {
			for _, m := range testName.FindAllString(c.Text, -1) {
				if declared[m] {
					continue
				}
				out = append(out, fmt.Sprintf("%s:%d: names the test %s: say what it proves, or leave it to the test",
					sf.rel, sf.fset.Position(c.Pos()).Line, m))
			}
		}
	}
	return out
}

// TestCommentProblemsFound: a long block and a test's name are flagged, a
// long doc.go, TestMain and a type named Test… are not.
func TestCommentProblemsFound(t *testing.T) {
	long := strings.Repeat("// a line of why\n", maxCommentLines+1)
	src := "package p\n\n" + long + "type A int\n\n" + strings.Repeat("// fine\n", maxCommentLines) + "type B int\n\n" +
		"// Proven by TestSomething, set up in TestMain; TestSpec is a type.\ntype TestSpec int\n"
	for _, tc := range []struct {
		name string
		want int
	}{{"p.go", 2}, {"doc.go", 1}} {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, tc.name, src, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		got := commentProblems(sourceFile{rel: tc.name, fset: fset, file: f}, map[string]bool{"TestMain": true, "TestSpec": true})
		if len(got) != tc.want {
			t.Errorf("%s: %d problems %q, want %d", tc.name, len(got), got, tc.want)
		}
	}
}
