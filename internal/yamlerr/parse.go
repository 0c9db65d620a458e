package yamlerr

import (
	"fmt"

	"github.com/goccy/go-yaml/lexer"
	"github.com/goccy/go-yaml/token"
)

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
