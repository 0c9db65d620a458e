package config

import (
	"encoding"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"

	"github.com/autocapture/autocapture/internal/yamlerr"
)

// decode decodes the document body over cfg (Default). A body go-yaml decodes
// whole and strictly is decoded exactly so. One it refuses is decoded again
// from Default, key by key against the config's types, so that one bad value
// hides no other: every unknown key (with the closest known key at its level)
// and every value of the wrong type is an error at its line and column naming
// its key path and what is wanted; the values that are well typed are decoded,
// so the validator still checks them. bad holds the key paths refused.
func decode(file string, f *ast.File, cfg *Config) (errs yamlerr.List, bad []string) {
	body := f.Docs[0].Body
	err := yaml.NodeToValue(body, cfg, yaml.Strict())
	if err == nil {
		return nil, nil
	}
	*cfg = Default()
	d := &decoder{file: file, anchors: anchorsOf(f)}
	d.value(body, reflect.ValueOf(cfg).Elem(), "")
	if len(d.errs) == 0 {
		// go-yaml refused what the walk let through: its word stands.
		var e *yamlerr.Error
		if !errors.As(yamlerr.FromDecodeIn(file, f, err), &e) {
			e = &yamlerr.Error{File: file, Msg: err.Error()}
		}
		d.errs = append(d.errs, e)
	}
	return d.errs, d.bad
}

// decoder walks a YAML node against a Go type, decoding what fits.
type decoder struct {
	file    string
	anchors map[string]ast.Node
	errs    yamlerr.List
	bad     []string
}

// anchorsOf maps each anchor of the file to its value, so an alias decodes
// on its own as it does within the whole document.
func anchorsOf(f *ast.File) map[string]ast.Node {
	m := map[string]ast.Node{}
	for _, doc := range f.Docs {
		ast.Walk(visitFunc(func(n ast.Node) {
			if a, ok := n.(*ast.AnchorNode); ok && a.Name != nil {
				m[a.Name.GetToken().Value] = a.Value
			}
		}), doc)
	}
	return m
}

type visitFunc func(ast.Node)

func (v visitFunc) Visit(n ast.Node) ast.Visitor { v(n); return v }

// resolve looks through anchors and aliases to the node that holds the value.
func (d *decoder) resolve(n ast.Node) ast.Node {
	for i := 0; n != nil && i < 100; i++ {
		switch a := n.(type) {
		case *ast.AnchorNode:
			n = a.Value
		case *ast.AliasNode:
			n = d.anchors[a.Value.GetToken().Value]
		default:
			return n
		}
	}
	return n
}

// fail records that the value at path (placed at n) is refused.
func (d *decoder) fail(n ast.Node, path, format string, args ...any) {
	d.errs = append(d.errs, yamlerr.At(d.file, n, "%s: %s", pathName(path), fmt.Sprintf(format, args...)))
	d.bad = append(d.bad, path)
}

// pathName is how messages name a key path; the root is the config.
func pathName(path string) string {
	if path == "" {
		return "the config"
	}
	return path
}

// value decodes the node at (through its anchor or alias) into dst, a
// settable value holding its default, and reports whether all of it fitted;
// problems are placed at at. A null keeps the default, as go-yaml does.
func (d *decoder) value(at ast.Node, dst reflect.Value, path string) bool {
	n := d.resolve(at)
	if n == nil || n.Type() == ast.NullType {
		return true
	}
	t := dst.Type()
	if unmarshals(t) {
		return d.leaf(at, n, dst, path)
	}
	switch t.Kind() {
	case reflect.Struct:
		return d.mapping(at, n, dst, path)
	case reflect.Pointer:
		if t.Elem().Kind() != reflect.Struct || unmarshals(t.Elem()) {
			return d.leaf(at, n, dst, path)
		}
		nv := reflect.New(t.Elem())
		if !dst.IsNil() {
			nv.Elem().Set(dst.Elem())
		}
		ok := d.mapping(at, n, nv.Elem(), path)
		if _, isMap := n.(ast.MapNode); isMap {
			dst.Set(nv)
		}
		return ok
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return d.leaf(at, n, dst, path)
		}
		return d.sequence(at, n, dst, path)
	case reflect.Map:
		return d.mapOf(at, n, dst, path)
	}
	return d.leaf(at, n, dst, path)
}

// leaf decodes a single value with go-yaml, and words its refusal.
func (d *decoder) leaf(at, n ast.Node, dst reflect.Value, path string) bool {
	nv := reflect.New(dst.Type())
	nv.Elem().Set(dst)
	err := yaml.NodeToValue(n, nv.Interface(), yaml.Strict())
	if err == nil {
		dst.Set(nv.Elem())
		return true
	}
	w := want(dst)
	if w == "" { // a type with its own unmarshaler and no words for it: its message
		msg := err.Error()
		var ye yaml.Error
		if errors.As(err, &ye) {
			msg = ye.GetMessage()
		}
		d.fail(at, path, "%s", msg)
		return false
	}
	g := got(n, dst.Type())
	var oe *yaml.OverflowError
	if errors.As(err, &oe) {
		g += " (out of range)"
	}
	d.fail(at, path, "%s, got %s", w, g)
	return false
}

// mapping decodes a mapping into the struct dst key by key: a key refused
// keeps its default, the others are decoded.
func (d *decoder) mapping(at, n ast.Node, dst reflect.Value, path string) bool {
	fields := fieldsOf(dst.Type())
	if _, ok := n.(ast.MapNode); !ok {
		d.fail(at, path, "%s, got %s", wantMapping(fields), got(n, dst.Type()))
		return false
	}
	seen := map[string]bool{}
	ok := true
	d.entries(n, func(k, v ast.Node) {
		name := keyName(k)
		if seen[name] {
			d.fail(k, join(path, name), "set twice (a merge << sets it too)")
			ok = false
			return
		}
		seen[name] = true
		f, known := fields.byName(name)
		if !known {
			d.errs = append(d.errs, yamlerr.At(d.file, k, "%s", unknownField(name, path, fields.names())))
			ok = false
			return
		}
		if !d.value(v, dst.FieldByIndex(f.index), join(path, name)) {
			ok = false
		}
	})
	return ok
}

// entries calls fn for each key and value of a mapping, those of merged
// mappings (<<: *anchor) included, in the order they are written.
func (d *decoder) entries(n ast.Node, fn func(k, v ast.Node)) {
	m, ok := d.resolve(n).(ast.MapNode)
	if !ok {
		return
	}
	it := m.MapRange()
	for it.Next() {
		if it.Key().IsMergeKey() {
			v := d.resolve(it.Value())
			if s, ok := v.(*ast.SequenceNode); ok {
				for _, e := range s.Values {
					d.entries(e, fn)
				}
				continue
			}
			d.entries(v, fn)
			continue
		}
		fn(it.Key(), it.Value())
	}
}

// sequence decodes a list item by item. An item refused is left zero (its
// path is refused), so the validator still checks the items around it.
func (d *decoder) sequence(at, n ast.Node, dst reflect.Value, path string) bool {
	s, ok := n.(*ast.SequenceNode)
	if !ok {
		d.fail(at, path, "%s, got %s", want(dst), got(n, dst.Type()))
		return false
	}
	out := reflect.MakeSlice(dst.Type(), len(s.Values), len(s.Values))
	ok = true
	for i, e := range s.Values {
		if !d.value(e, out.Index(i), fmt.Sprintf("%s[%d]", path, i)) {
			ok = false
		}
	}
	dst.Set(out)
	return ok
}

// mapOf decodes a mapping into a Go map, keys and values one by one; an
// entry refused is left out.
func (d *decoder) mapOf(at, n ast.Node, dst reflect.Value, path string) bool {
	if _, ok := n.(ast.MapNode); !ok {
		d.fail(at, path, "%s, got %s", want(dst), got(n, dst.Type()))
		return false
	}
	t := dst.Type()
	out := reflect.MakeMap(t)
	if !dst.IsNil() {
		for _, k := range dst.MapKeys() {
			out.SetMapIndex(k, dst.MapIndex(k))
		}
	}
	ok := true
	d.entries(n, func(k, v ast.Node) {
		kv := reflect.New(t.Key()).Elem()
		if !d.leaf(k, d.resolve(k), kv, join(path, keyName(k))) {
			ok = false
			return
		}
		vv := reflect.New(t.Elem()).Elem()
		if !d.value(v, vv, join(path, keyName(k))) {
			ok = false
			return
		}
		out.SetMapIndex(kv, vv)
	})
	dst.Set(out)
	return ok
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func keyName(k ast.Node) string {
	if s, ok := k.(*ast.StringNode); ok {
		return s.Value
	}
	if tk := k.GetToken(); tk != nil {
		return tk.Value
	}
	return k.String()
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

// wanter is a config type that says what it wants, in words (Age).
type wanter interface{ want() string }

var (
	durationType = reflect.TypeFor[time.Duration]()
	secretType   = reflect.TypeFor[Secret]()
)

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
func want(dst reflect.Value) string {
	t := dst.Type()
	if w, ok := reflect.New(t).Interface().(wanter); ok {
		return w.want()
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
		if dst.String() == "" || t == secretType {
			return "want a string"
		}
		return fmt.Sprintf("want a string, e.g. %q", dst.String())
	case reflect.Slice, reflect.Array:
		if dst.Len() == 0 || t.Elem().Kind() != reflect.String || t.Elem() == secretType {
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
func got(n ast.Node, t reflect.Type) string {
	if tn, ok := n.(*ast.TagNode); ok && tn.Value != nil && tn.Start != nil {
		return got(tn.Value, t) + " tagged " + tn.Start.Value
	}
	switch n.(type) {
	case ast.MapNode:
		return "a mapping"
	case *ast.SequenceNode:
		return "a list"
	}
	switch {
	case t == secretType || n.GetToken() == nil || !scalarKind(t):
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
