package yamlerr

import (
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/parser"
)

// TestDecodeErrorsCarryPositions: go-yaml's own errors keep their token's
// position; a duration error, which go-yaml reports without one, is placed at
// the scalar it quotes.
func TestDecodeErrorsCarryPositions(t *testing.T) {
	type cfg struct {
		A struct {
			Wait time.Duration `yaml:"wait"`
			N    int           `yaml:"n"`
		} `yaml:"a"`
	}
	cases := []struct{ name, src, want string }{
		{"unknown field", "a:\n  n: 1\n  nn: 2\n", `f.yaml:3:3: unknown field "nn"`},
		{"wrong type", "a:\n  n: many\n", "f.yaml:2:6: "},
		{"duration without position", "a:\n  n: 1\n  wait: soon\n", `f.yaml:3:9: time: invalid duration "soon"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := parser.ParseBytes([]byte(c.src), 0)
			if err != nil {
				t.Fatal(err)
			}
			var v cfg
			err = FromDecodeIn("f.yaml", f, yaml.NodeToValue(f.Docs[0].Body, &v, yaml.Strict()))
			if err == nil || !strings.HasPrefix(err.Error(), c.want) {
				t.Fatalf("err = %v, want prefix %q", err, c.want)
			}
		})
	}
}

func TestListJoinsOneProblemPerLine(t *testing.T) {
	var l List
	if l.Err() != nil {
		t.Fatal("empty list is an error")
	}
	l = append(l, &Error{File: "a.yaml", Line: 2, Col: 5, Msg: "bad"}, &Error{File: "b.yaml", Msg: "worse"}, &Error{Msg: "bare"})
	if got := l.Err().Error(); got != "a.yaml:2:5: bad\nb.yaml: worse\nbare" {
		t.Fatalf("got %q", got)
	}
}

// TestSortByPositionPutsAFileInOrder: problems gathered by different passes
// (decoding, then validation) read top to bottom: by line, then column, those
// without a line after; files keep their first order, equal places theirs.
func TestSortByPositionPutsAFileInOrder(t *testing.T) {
	l := List{
		{File: "a.yaml", Line: 9, Col: 3, Msg: "validation, late"},
		{File: "a.yaml", Msg: "whole file"},
		{File: "b.yaml", Line: 1, Col: 1, Msg: "other file"},
		{File: "a.yaml", Line: 2, Col: 7, Msg: "decode"},
		{File: "a.yaml", Line: 2, Col: 3, Msg: "unknown key"},
		{File: "a.yaml", Line: 9, Col: 3, Msg: "validation, same place"},
	}
	l.SortByPosition()
	want := "a.yaml:2:3: unknown key\na.yaml:2:7: decode\na.yaml:9:3: validation, late\n" +
		"a.yaml:9:3: validation, same place\na.yaml: whole file\nb.yaml:1:1: other file"
	if got := l.Error(); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

// TestFromParsePointsAtTheUnclosedOpener: go-yaml reports a '{' or '[' left
// open where it gave up (the next item's line); the error is placed at the
// opener instead, and left where it is when the collection is closed further
// down (a missing comma, which is where go-yaml points).
func TestFromParsePointsAtTheUnclosedOpener(t *testing.T) {
	cases := []struct{ name, yaml, want string }{
		{"mapping never closed", "steps:\n  - id: s\n    scrape: {gap: 2s\n  - id: t\n    scrape: {}\n",
			`f.yaml:3:13: this "{" is never closed: end it with "}" (the parser stopped at line 4: ',' or '}' must be specified)`},
		{"list never closed", "a:\n  match: [x, y\n  steps: []\n",
			`f.yaml:2:10: this "[" is never closed: end it with "]" (the parser stopped at line 3: ',' or ']' must be specified)`},
		{"closed later, a comma missing", "a: {limit: 1\n  bogus: 1}\n",
			`f.yaml:2:3: ',' or '}' must be specified`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := parser.ParseBytes([]byte(c.yaml), 0)
			if err == nil {
				t.Fatal("parsed")
			}
			if got := FromParse("f.yaml", []byte(c.yaml), err).Error(); got != c.want {
				t.Fatalf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}
