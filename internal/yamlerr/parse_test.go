package yamlerr

import (
	"testing"

	"github.com/goccy/go-yaml/parser"
)

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
