package yamlerr

import (
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml/parser"
)

// TestDecoderFollowsInlineMapsAndPointers: the walk handles what the config
// does not use yet: ",inline" structs (their keys at the parent's level), maps,
// pointers and lists of structs, each refusal at its own path.
func TestDecoderFollowsInlineMapsAndPointers(t *testing.T) {
	type Inner struct {
		A int `yaml:"a"`
	}
	type probe struct {
		Inner `yaml:",inline"`
		M     map[string]time.Duration `yaml:"m"`
		P     *Inner                   `yaml:"p"`
		L     []Inner                  `yaml:"l"`
	}
	y := "a: x\nm: {k: 5m, j: 5 m}\np: {a: y, aa: 1}\nl: [{a: 1}, {a: z}]\nM: 1\n"
	f, err := parser.ParseBytes([]byte(y), 0)
	if err != nil {
		t.Fatal(err)
	}
	var v probe
	errs, _ := Walk(f.Docs[0].Body, &v, Options{File: "p.yaml", AST: f})
	want := strings.Join([]string{
		`p.yaml:1:4: a: want an integer, e.g. 1, got "x"`,
		`p.yaml:2:15: m.j: want a duration such as 20s, 500ms or 1m30s, got "5 m"`,
		`p.yaml:3:8: p.a: want an integer, e.g. 1, got "y"`,
		`p.yaml:3:11: unknown field "aa" in p: did you mean "a"?`,
		`p.yaml:4:17: l[1].a: want an integer, e.g. 1, got "z"`,
		`p.yaml:5:1: unknown field "M" at the top level: did you mean "m"?`,
	}, "\n")
	if got := errs.Error(); got != want {
		t.Fatalf("errors\n%s\nwant\n%s", got, want)
	}
	if v.M["k"] != 5*time.Minute || len(v.M) != 1 || v.P == nil || len(v.L) != 2 || v.L[0].A != 1 {
		t.Fatalf("well-typed values not decoded: %+v", v)
	}
}
