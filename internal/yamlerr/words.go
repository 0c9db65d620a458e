package yamlerr

import (
	"encoding"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
)

// unknownField says a key is not one of its level's, suggesting the closest.
func unknownField(name, path string, known []string) string {
	where := " in " + path
	if path == "" {
		where = " at the top level"
	}
	if s := closest(name, known); s != "" {
		return fmt.Sprintf("unknown field %q%s: did you mean %q?", name, where, s)
	}
	return fmt.Sprintf("unknown field %q%s: want one of %s", name, where, strings.Join(known, ", "))
}

// closest is the known key nearest to name, if near enough to be a typo:
// at most one edit in three letters, case and - for _ aside.
func closest(name string, known []string) string {
	norm := func(s string) string { return strings.ReplaceAll(strings.ToLower(s), "-", "_") }
	best, bestD := "", 0
	for _, k := range known {
		d := editDistance(norm(name), norm(k))
		if d <= max(1, len(k)/3) && (best == "" || d < bestD) {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance counts the insertions, deletions, substitutions and swaps of
// adjacent letters that turn a into b (optimal string alignment).
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// Wanter is a type that says what it wants, in words, such as "want a
// duration such as 30d".
type Wanter interface{ WantYAML() string }

var (
	durationType = reflect.TypeFor[time.Duration]()
	nodeType     = reflect.TypeFor[ast.Node]()
)

// secret says whether t's values must never be quoted.
func (d *decoder) secret(t reflect.Type) bool {
	for _, s := range d.o.Secrets {
		if s == t {
			return true
		}
	}
	return false
}

// unmarshals says whether go-yaml decodes t with t's own code (or its own
// for time types) rather than by t's kind.
func unmarshals(t reflect.Type) bool {
	switch reflect.New(t).Interface().(type) {
	case yaml.BytesUnmarshaler, yaml.BytesUnmarshalerContext, yaml.InterfaceUnmarshaler,
		yaml.InterfaceUnmarshalerContext, yaml.NodeUnmarshaler, yaml.NodeUnmarshalerContext,
		*time.Time, *time.Duration, encoding.TextUnmarshaler:
		return true
	}
	return false
}

// want says what a value of dst's type looks like, with an example (dst's
// default when it has one); "" for a type with its own unmarshaler and no
// words of its own.
func (d *decoder) want(dst reflect.Value) string {
	t := dst.Type()
	if w, ok := reflect.New(t).Interface().(Wanter); ok {
		return w.WantYAML()
	}
	switch {
	case t == durationType:
		return "want a duration such as 20s, 500ms or 1m30s"
	case unmarshals(t):
		return ""
	}
	switch t.Kind() {
	case reflect.Bool:
		return "want true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		ex := dst.Int()
		if ex == 0 {
			ex = 1
		}
		return fmt.Sprintf("want an integer, e.g. %d", ex)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		ex := dst.Uint()
		if ex == 0 {
			ex = 1
		}
		return fmt.Sprintf("want a whole number, e.g. %d", ex)
	case reflect.Float32, reflect.Float64:
		ex := dst.Float()
		if ex == 0 {
			ex = 0.5
		}
		return fmt.Sprintf("want a number, e.g. %v", ex)
	case reflect.String:
		if dst.String() == "" || d.secret(t) {
			return "want a string"
		}
		return fmt.Sprintf("want a string, e.g. %q", dst.String())
	case reflect.Slice, reflect.Array:
		if dst.Len() == 0 || t.Elem().Kind() != reflect.String || d.secret(t.Elem()) {
			return "want a list, e.g. [a, b]"
		}
		ex := make([]string, dst.Len())
		for i := range ex {
			ex[i] = dst.Index(i).String()
		}
		return fmt.Sprintf("want a list, e.g. [%s]", strings.Join(ex, ", "))
	case reflect.Map:
		return "want a mapping"
	case reflect.Struct:
		return wantMapping(fieldsOf(t))
	case reflect.Pointer:
		if t.Elem().Kind() == reflect.Struct {
			return wantMapping(fieldsOf(t.Elem()))
		}
	}
	return "want a " + t.String()
}

// wantMapping names a struct's first keys as the example.
func wantMapping(fields fieldList) string {
	names := fields.names()
	if len(names) > 4 {
		names = append(names[:4:4], "…")
	}
	return "want a mapping (keys " + strings.Join(names, ", ") + ")"
}

// got says what the file holds instead: the kind of collection, or a scalar
// quoted as written only where a scalar belongs and is no secret. A scalar
// written where a block belongs is not quoted: the block may hold secrets
// (database: postgres://u:pass@…, basic_auth: user:pass, notify.slack: xoxb-…).
func (d *decoder) got(n ast.Node, t reflect.Type) string {
	if tn, ok := n.(*ast.TagNode); ok && tn.Value != nil && tn.Start != nil {
		return d.got(tn.Value, t) + " tagged " + tn.Start.Value
	}
	switch n.(type) {
	case ast.MapNode:
		return "a mapping"
	case *ast.SequenceNode:
		return "a list"
	}
	switch {
	case d.secret(t) || n.GetToken() == nil || !scalarKind(t):
		return "a " + strings.ToLower(n.Type().String())
	case n.Type() == ast.StringType:
		return fmt.Sprintf("%q", n.GetToken().Value)
	case t == durationType && (n.Type() == ast.IntegerType || n.Type() == ast.FloatType):
		return n.GetToken().Value + " (a number without a unit)"
	}
	return n.GetToken().Value
}

// scalarKind says whether t (through pointers) holds one plain value.
func scalarKind(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map, reflect.Slice, reflect.Array, reflect.Interface:
		return false
	}
	return true
}

// field is one YAML key of a struct: its name and where it is (inline
// structs' fields are reached through their parent's index).
type field struct {
	name  string
	index []int
}

type fieldList []field

func (l fieldList) byName(name string) (field, bool) {
	for _, f := range l {
		if f.name == name {
			return f, true
		}
	}
	return field{}, false
}

func (l fieldList) names() []string {
	out := make([]string, len(l))
	for i, f := range l {
		out[i] = f.name
	}
	return out
}

// fieldsOf lists a struct's YAML keys as go-yaml reads them: the yaml tag's
// name (else json's, else the field's name in lower case), ",inline" structs'
// keys in their parent's place, "-" and unexported fields left out.
func fieldsOf(t reflect.Type) fieldList {
	var out fieldList
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		tag := sf.Tag.Get("yaml")
		if tag == "" {
			tag = sf.Tag.Get("json")
		}
		if (sf.PkgPath != "" && !sf.Anonymous) || tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = strings.ToLower(sf.Name)
		}
		if inline := strings.Contains(","+opts+",", ",inline,"); inline {
			ft := sf.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct && sf.Type.Kind() == reflect.Struct {
				for _, f := range fieldsOf(ft) {
					out = append(out, field{f.name, append([]int{i}, f.index...)})
				}
				continue
			}
		}
		out = append(out, field{name, []int{i}})
	}
	return out
}
