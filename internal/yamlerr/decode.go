package yamlerr

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"
)

// Options say where a value is decoded and how it is named.
type Options struct {
	// File names the file in every error; AST is the parsed file, whose
	// anchors an alias decodes from.
	File string
	AST  *ast.File
	// Path is the key path of the node decoded ("" for a document's root),
	// Root what messages call that root when Path is "".
	Path, Root string
	// Reset puts the destination back to its defaults before the walk, when
	// go-yaml's decode of the whole failed part way; nil leaves it as is.
	Reset func()
	// Secrets are types whose values are never quoted in a message.
	Secrets []reflect.Type
}

// Decode decodes n over dst (a pointer to a value holding its defaults). A
// node go-yaml decodes whole and strictly is decoded exactly so. One it
// refuses is decoded again key by key against dst's type, so that one bad
// value hides no other: every unknown key (with the closest known key at its
// level) and every value of the wrong type is an error at its line and
// column, naming its key path and what is wanted; the values that are well
// typed are decoded, so a validator can still check them. bad holds the key
// paths refused.
func Decode(n ast.Node, dst any, o Options) (errs List, bad []string) {
	err := NodeToValue(n, dst, yaml.Strict())
	if err == nil {
		return nil, nil
	}
	if o.Reset != nil {
		o.Reset()
	}
	errs, bad = Walk(n, dst, o)
	if len(errs) == 0 {
		// go-yaml refused what the walk let through: its word stands.
		var e *Error
		if !errors.As(FromDecodeIn(o.File, o.AST, err), &e) {
			e = &Error{File: o.File, Msg: err.Error()}
		}
		if e.Line == 0 {
			if tk := keyToken(n); tk != nil && tk.Position != nil {
				e.Line, e.Col = tk.Position.Line, tk.Position.Column
			}
		}
		errs = append(errs, e)
	}
	return errs, bad
}

// Walk is Decode's key-by-key decode alone, without go-yaml's decode of the
// whole first.
func Walk(n ast.Node, dst any, o Options) (errs List, bad []string) {
	d := &decoder{o: o, anchors: anchorsOf(o.AST)}
	d.value(n, reflect.ValueOf(dst).Elem(), o.Path)
	return d.errs, d.bad
}

// NodeToValue is yaml.NodeToValue, with a panic inside go-yaml (seen: a
// tagged scalar where a list is expected) returned as an error.
func NodeToValue(n ast.Node, v any, opts ...yaml.DecodeOption) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("cannot decode this value: %v", r)
		}
	}()
	return yaml.NodeToValue(n, v, opts...)
}

// keyToken is where a node is placed: a mapping's own token is its first
// ':', so a mapping is placed at its first key.
func keyToken(n ast.Node) *token.Token {
	if m, ok := n.(*ast.MappingNode); ok && len(m.Values) > 0 {
		return m.Values[0].Key.GetToken()
	}
	if n == nil {
		return nil
	}
	return n.GetToken()
}

// decoder walks a YAML node against a Go type, decoding what fits.
type decoder struct {
	o       Options
	anchors map[string]ast.Node
	errs    List
	bad     []string
}

// anchorsOf maps each anchor of the file to its value, so an alias decodes
// on its own as it does within the whole document.
func anchorsOf(f *ast.File) map[string]ast.Node {
	m := map[string]ast.Node{}
	if f == nil {
		return m
	}
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
	d.errs = append(d.errs, At(d.o.File, n, "%s: %s", d.pathName(path), fmt.Sprintf(format, args...)))
	d.bad = append(d.bad, path)
}

// pathName is how messages name a key path; "" is the root.
func (d *decoder) pathName(path string) string {
	if path == "" {
		return d.o.Root
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
	if t == nodeType { // kept as written, for the caller to read
		dst.Set(reflect.ValueOf(n))
		return true
	}
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
	err := NodeToValue(n, nv.Interface(), yaml.Strict())
	if err == nil {
		dst.Set(nv.Elem())
		return true
	}
	w := d.want(dst)
	if w == "" { // a type with its own unmarshaler and no words for it: its message
		msg := err.Error()
		var ye yaml.Error
		if errors.As(err, &ye) {
			msg = ye.GetMessage()
		}
		d.fail(at, path, "%s", msg)
		return false
	}
	g := d.got(n, dst.Type())
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
		d.fail(at, path, "%s, got %s", wantMapping(fields), d.got(n, dst.Type()))
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
			d.errs = append(d.errs, At(d.o.File, k, "%s", unknownField(name, path, fields.names())))
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
		d.fail(at, path, "%s, got %s", d.want(dst), d.got(n, dst.Type()))
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
		d.fail(at, path, "%s, got %s", d.want(dst), d.got(n, dst.Type()))
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
