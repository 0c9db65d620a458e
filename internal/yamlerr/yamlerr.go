// Package yamlerr turns YAML decoding and validation problems into errors that
// name the file, line and column, as `autocapture check` prints them.
package yamlerr

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/lexer"
	"github.com/goccy/go-yaml/token"
)

// Error is one problem at one place in one file.
type Error struct {
	File string
	Line int
	Col  int
	Msg  string
}

// Error formats as file:line:col: message.
func (e *Error) Error() string {
	switch {
	case e.Line > 0:
		return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Col, e.Msg)
	case e.File != "":
		return fmt.Sprintf("%s: %s", e.File, e.Msg)
	}
	return e.Msg
}

// List is several problems, reported together.
type List []*Error

// Error joins the problems one per line.
func (l List) Error() string {
	s := make([]string, len(l))
	for i, e := range l {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// Err returns nil for an empty list, else the list.
func (l List) Err() error {
	if len(l) == 0 {
		return nil
	}
	return l
}

// SortByPosition puts the problems of each file in the order of the file,
// by line and column; problems without a position follow their file's, and
// files keep the order in which they first appear. Equal places keep their order.
func (l List) SortByPosition() {
	files := map[string]int{}
	for _, e := range l {
		if _, ok := files[e.File]; !ok {
			files[e.File] = len(files)
		}
	}
	slices.SortStableFunc(l, func(a, b *Error) int {
		if c := cmp.Compare(files[a.File], files[b.File]); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(unplaced(a), unplaced(b)), cmp.Compare(a.Line, b.Line), cmp.Compare(a.Col, b.Col))
	})
}

// unplaced is 1 for a problem without a line, which sorts after those with one.
func unplaced(e *Error) int {
	if e.Line == 0 {
		return 1
	}
	return 0
}

// FromDecode converts a go-yaml error into an Error with the position of its token.
// Errors without a position keep their text under the file's name.
func FromDecode(file string, err error) error {
	if err == nil {
		return nil
	}
	var ye yaml.Error
	if errors.As(err, &ye) {
		e := &Error{File: file, Msg: ye.GetMessage()}
		if tk := ye.GetToken(); tk != nil && tk.Position != nil {
			e.Line, e.Col = tk.Position.Line, tk.Position.Column
		}
		return e
	}
	return &Error{File: file, Msg: err.Error()}
}

var quoted = regexp.MustCompile(`"([^"]*)"`)

// FromDecodeIn is FromDecode for a parsed file: an error that carries no position
// (go-yaml drops it for durations) is placed at the first scalar whose value the
// error quotes, e.g. time: invalid duration "soon".
func FromDecodeIn(file string, f *ast.File, err error) error {
	e := FromDecode(file, err)
	pe, ok := e.(*Error)
	if !ok || pe.Line > 0 || f == nil {
		return e
	}
	m := quoted.FindStringSubmatch(pe.Msg)
	if m == nil {
		return e
	}
	var found ast.Node
	for _, doc := range f.Docs {
		ast.Walk(visitor(func(n ast.Node) bool {
			if found != nil {
				return false
			}
			if _, scalar := n.(ast.ScalarNode); scalar && n.GetToken() != nil && n.GetToken().Value == m[1] {
				found = n
				return false
			}
			return true
		}), doc)
	}
	if found != nil {
		tk := found.GetToken()
		pe.Line, pe.Col = tk.Position.Line, tk.Position.Column
	}
	return pe
}

type visitor func(ast.Node) bool

func (v visitor) Visit(n ast.Node) ast.Visitor {
	if v(n) {
		return v
	}
	return nil
}

// At makes an Error at a node's position.
func At(file string, n ast.Node, format string, args ...any) *Error {
	var tk *token.Token
	if n != nil {
		tk = n.GetToken()
	}
	return AtToken(file, tk, format, args...)
}

// AtToken makes an Error at a token's position.
func AtToken(file string, tk *token.Token, format string, args ...any) *Error {
	e := &Error{File: file, Msg: fmt.Sprintf(format, args...)}
	if tk != nil && tk.Position != nil {
		e.Line, e.Col = tk.Position.Line, tk.Position.Column
	}
	return e
}

// FromParse is FromDecode for an error of the YAML parser over data. go-yaml
// places an unclosed flow collection where it gave up, often the next item's
// line; when a '{' or '[' opened on an earlier line is never closed, the
// error is placed at that opener and says so.
func FromParse(file string, data []byte, err error) error {
	e, ok := FromDecode(file, err).(*Error)
	if !ok || e.Line == 0 {
		return FromDecode(file, err)
	}
	open := unclosedBefore(lexer.Tokenize(string(data)), e.Line, e.Col)
	if open == nil || open.Position.Line >= e.Line {
		return e
	}
	closer := map[string]string{"{": "}", "[": "]"}[open.Value]
	return &Error{File: file, Line: open.Position.Line, Col: open.Position.Column,
		Msg: fmt.Sprintf("this %q is never closed: end it with %q (the parser stopped at line %d: %s)", open.Value, closer, e.Line, e.Msg)}
}

// unclosedBefore returns the innermost '{' or '[' before line:col that no
// later token closes (a '{' closed further down lacks a comma, not a '}').
func unclosedBefore(tks token.Tokens, line, col int) *token.Token {
	var stack []*token.Token
	for _, tk := range tks {
		switch tk.Type {
		case token.MappingStartType, token.SequenceStartType:
			stack = append(stack, tk)
		case token.MappingEndType, token.SequenceEndType:
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
		}
	}
	for i := len(stack) - 1; i >= 0; i-- {
		if p := stack[i].Position; p != nil && (p.Line < line || p.Line == line && p.Column < col) {
			return stack[i]
		}
	}
	return nil
}
