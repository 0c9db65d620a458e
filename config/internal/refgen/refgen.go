// Package refgen writes the configuration reference (docs/configuration.md)
// from the config package itself: the key paths from the structs' yaml tags,
// the text from their doc comments (read with go/parser from the package's
// source), the defaults from a value (config.Default()). The config package's
// tests run it and fail when the committed reference differs.
package refgen

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Generate returns the reference for root, a struct value holding the
// defaults, whose type and the struct types it reaches are declared in the Go
// files of dir (the package's source; _test.go files are not read). Every
// leaf key needs a doc comment: one without is an error naming its key.
func Generate(dir string, root any, preamble string) ([]byte, error) {
	docs, err := parseDocs(dir)
	if err != nil {
		return nil, err
	}
	v := reflect.ValueOf(root)
	g := &gen{docs: docs, pkg: v.Type().PkgPath()}
	g.walk("", v.Type(), v)
	if len(g.errs) > 0 {
		return nil, fmt.Errorf("refgen: %s", strings.Join(g.errs, "; "))
	}
	var b bytes.Buffer
	b.WriteString(preamble)
	if d := docs.types[v.Type().Name()]; d != "" {
		b.WriteString(g.markdown(d, yamlKeys(v.Type())))
	}
	b.WriteString("Blocks:")
	for i, bl := range g.blocks {
		sep := ","
		if i == 0 {
			sep = ""
		}
		fmt.Fprintf(&b, "%s [%s](#%s)", sep, bl.title(), anchor(bl.title()))
	}
	b.WriteString(".\n")
	for _, bl := range g.blocks {
		fmt.Fprintf(&b, "\n## %s\n\n", bl.title())
		b.WriteString(bl.doc)
		b.WriteString("| key | type | default | |\n|---|---|---|---|\n")
		for _, r := range bl.rows {
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", r.key, r.typ, cell(r.def), cell(r.doc))
		}
	}
	return b.Bytes(), nil
}

// Keys lists the key paths a reference generated for root holds, blocks
// included, in the reference's order.
func Keys(root any) []string {
	v := reflect.ValueOf(root)
	g := &gen{docs: &sourceDocs{types: map[string]string{}, fields: map[string]map[string]fieldDoc{}}, pkg: v.Type().PkgPath(), noDocs: true}
	g.walk("", v.Type(), v)
	var out []string
	for _, bl := range g.blocks {
		for _, r := range bl.rows {
			out = append(out, r.key)
		}
	}
	return out
}

// sourceDocs is what the package's source says about its types: each type's
// doc comment and each struct field's (its line comment when it has none).
type sourceDocs struct {
	types  map[string]string
	fields map[string]map[string]fieldDoc // type name → Go field name
}

type fieldDoc struct {
	text string
}

func parseDocs(dir string) (*sourceDocs, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	d := &sourceDocs{types: map[string]string{}, fields: map[string]map[string]fieldDoc{}}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				doc := ts.Doc
				if doc == nil && len(gd.Specs) == 1 {
					doc = gd.Doc
				}
				d.types[ts.Name.Name] = doc.Text()
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					continue
				}
				fields := map[string]fieldDoc{}
				for _, fl := range st.Fields.List {
					text := fl.Doc.Text()
					if text == "" {
						text = fl.Comment.Text()
					}
					for _, n := range fl.Names {
						fields[n.Name] = fieldDoc{text: text}
					}
				}
				d.fields[ts.Name.Name] = fields
			}
		}
	}
	return d, nil
}

type gen struct {
	docs   *sourceDocs
	pkg    string
	blocks []*block
	errs   []string
	noDocs bool
}

type block struct {
	path string
	doc  string
	rows []row
}

func (b *block) title() string {
	if b.path == "" {
		return "Top level"
	}
	return b.path
}

type row struct {
	key, typ, def, doc string
}

var durationType = reflect.TypeFor[time.Duration]()

// walk adds the block of struct type t at path (v its defaults; invalid for
// a block that is off by default) and, after it, the blocks its fields hold.
func (g *gen) walk(path string, t reflect.Type, v reflect.Value) {
	bl := &block{path: path}
	fields := g.docs.fields[t.Name()]
	keys := yamlKeys(t)
	if path != "" {
		bl.doc = g.markdown(g.docs.types[t.Name()], keys)
	}
	g.blocks = append(g.blocks, bl)
	type sub struct {
		path string
		t    reflect.Type
		v    reflect.Value
	}
	var subs []sub
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		key, ok := keys[sf.Name]
		if !ok {
			continue
		}
		kp := key
		if path != "" {
			kp = path + "." + key
		}
		var fv reflect.Value
		if v.IsValid() {
			fv = v.Field(i)
		}
		doc := g.fieldText(fields[sf.Name].text, sf.Name, keys)
		ft := sf.Type
		if ft.Kind() == reflect.Pointer && ft.Elem().Kind() == reflect.Struct {
			ft = ft.Elem()
			if fv.IsValid() {
				if fv.IsNil() {
					fv = reflect.Value{}
				} else {
					fv = fv.Elem()
				}
			}
		}
		if ft.Kind() == reflect.Struct && ft.PkgPath() == g.pkg && !unmarshaler(ft) {
			if doc == "" {
				doc = g.fieldText(firstSentence(g.docs.types[ft.Name()]), ft.Name(), keys)
			}
			def := ""
			if !fv.IsValid() {
				def = "not set (off)"
			}
			bl.rows = append(bl.rows, row{kp, fmt.Sprintf("[block](#%s)", anchor(kp)), def, doc})
			subs = append(subs, sub{kp, ft, fv})
			continue
		}
		if doc == "" && !g.noDocs {
			g.errs = append(g.errs, kp+": no doc comment on "+t.Name()+"."+sf.Name)
		}
		bl.rows = append(bl.rows, row{kp, typeName(sf.Type), defaultOf(key, fv), doc})
	}
	for _, s := range subs {
		g.walk(s.path, s.t, s.v)
	}
}

// unmarshaler says whether a struct type reads itself (it is a leaf).
func unmarshaler(t reflect.Type) bool {
	_, ok := reflect.PointerTo(t).MethodByName("UnmarshalYAML")
	return ok
}

// typeName is a leaf's type as a config writer thinks of it.
func typeName(t reflect.Type) string {
	switch {
	case t == durationType:
		return "duration"
	case t.Name() == "Age":
		return "age (30d, 2w, 720h)"
	case t.Name() == "Secret":
		return "secret"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "integer"
	case reflect.Float64, reflect.Float32:
		return "number"
	case reflect.Slice:
		return "list of " + typeName(t.Elem()) + "s"
	}
	return t.String()
}

// defaultOf prints a leaf's default as it is written in YAML.
func defaultOf(key string, v reflect.Value) string {
	if !v.IsValid() {
		return "—"
	}
	if v.Type() == durationType {
		return "`" + shortDuration(time.Duration(v.Int())) + "`"
	}
	if s, ok := v.Interface().(fmt.Stringer); ok && v.Kind() != reflect.String {
		return "`" + s.String() + "`"
	}
	switch v.Kind() {
	case reflect.String:
		if v.String() == "" {
			return `""`
		}
		return "`" + v.String() + "`"
	case reflect.Slice:
		var items []string
		for i := 0; i < v.Len(); i++ {
			items = append(items, fmt.Sprint(v.Index(i).Interface()))
		}
		return "`[" + strings.Join(items, ", ") + "]`"
	case reflect.Int, reflect.Int64, reflect.Int32:
		n := v.Int()
		s := "`" + strconv.FormatInt(n, 10) + "`"
		if (strings.HasSuffix(key, "bytes") || strings.HasSuffix(key, "size")) && n >= 1<<20 && n%(1<<20) == 0 {
			if n%(1<<30) == 0 {
				return fmt.Sprintf("%s (%d GiB)", s, n>>30)
			}
			return fmt.Sprintf("%s (%d MiB)", s, n>>20)
		}
		return s
	}
	return "`" + fmt.Sprint(v.Interface()) + "`"
}

// shortDuration drops a duration's zero tail: 720h, 10m, 1m30s, 0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if d == 0 {
		return s
	}
	for _, tail := range []string{"0s", "0m"} {
		if strings.HasSuffix(s, tail) && len(s) > len(tail) && !unicode.IsDigit(rune(s[len(s)-len(tail)-1])) {
			s = strings.TrimSuffix(s, tail)
		}
	}
	return s
}

// fieldText is a field's doc comment as one line, its own Go name (when it
// opens the comment) and its siblings' written as their YAML keys.
func (g *gen) fieldText(text, goName string, keys map[string]string) string {
	text = strings.Join(strings.Fields(text), " ")
	if text == "" {
		return ""
	}
	stripped := false
	for _, lead := range []string{goName + " is ", goName + ": ", goName + " are "} {
		if rest, ok := strings.CutPrefix(text, lead); ok {
			r, n := utf8.DecodeRuneInString(rest)
			text, stripped = string(unicode.ToUpper(r))+rest[n:], true
			break
		}
	}
	if rest, ok := strings.CutPrefix(text, goName+" "); ok && !stripped && keys[goName] != "" {
		return "`" + keys[goName] + "` " + g.yamlNames(rest, keys)
	}
	return g.yamlNames(text, keys)
}

// camel is a Go name no English word is spelt as (MaxConcurrent,
// ClientCAFile): a field named Prometheus or TLS is left as written, as the
// word means the thing more often than the key.
var camel = regexp.MustCompile(`[a-z][A-Z]`)

// yamlNames writes the Go names of a struct's fields, where a doc comment
// mentions them, as their YAML keys.
func (g *gen) yamlNames(text string, keys map[string]string) string {
	if len(keys) == 0 {
		return text
	}
	names := make([]string, 0, len(keys))
	for n := range keys {
		if camel.MatchString(n) {
			names = append(names, regexp.QuoteMeta(n))
		}
	}
	if len(names) == 0 {
		return text
	}
	slices.SortFunc(names, func(a, b string) int { return len(b) - len(a) })
	re := regexp.MustCompile(`\b(` + strings.Join(names, "|") + `)\b`)
	return re.ReplaceAllStringFunc(text, func(n string) string { return "`" + keys[n] + "`" })
}

// yamlKeys maps a struct's exported Go field names to their YAML keys (the
// yaml tag's name, else the field's name in lower case, as go-yaml reads it).
func yamlKeys(t reflect.Type) map[string]string {
	keys := map[string]string{}
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		key, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
		if !sf.IsExported() || key == "-" {
			continue
		}
		if key == "" {
			key = strings.ToLower(sf.Name)
		}
		keys[sf.Name] = key
	}
	return keys
}

// markdown renders a type's doc comment: paragraphs, "- " lists and indented
// code blocks (gofmt's doc comment forms).
func (g *gen) markdown(text string, keys map[string]string) string {
	var b strings.Builder
	for _, para := range strings.Split(strings.TrimSpace(text), "\n\n") {
		lines := strings.Split(para, "\n")
		switch {
		case allIndented(lines, "\t"):
			b.WriteString("```\n")
			for _, l := range lines {
				b.WriteString(strings.TrimPrefix(l, "\t") + "\n")
			}
			b.WriteString("```\n\n")
		case strings.HasPrefix(strings.TrimSpace(lines[0]), "- "):
			var item []string
			flush := func() {
				if len(item) > 0 {
					b.WriteString("- " + g.yamlNames(strings.Join(item, " "), keys) + "\n")
				}
				item = nil
			}
			for _, l := range lines {
				l = strings.TrimSpace(l)
				if rest, ok := strings.CutPrefix(l, "- "); ok {
					flush()
					l = rest
				}
				item = append(item, l)
			}
			flush()
			b.WriteString("\n")
		default:
			b.WriteString(g.yamlNames(strings.Join(strings.Fields(para), " "), keys) + "\n\n")
		}
	}
	return strings.TrimRight(b.String(), "\n") + "\n\n"
}

func allIndented(lines []string, prefix string) bool {
	for _, l := range lines {
		if !strings.HasPrefix(l, prefix) {
			return false
		}
	}
	return true
}

// firstSentence is a doc comment's first sentence.
func firstSentence(text string) string {
	text = strings.Join(strings.Fields(text), " ")
	if i := strings.Index(text, ". "); i >= 0 {
		return text[:i+1]
	}
	return text
}

// cell makes text safe in a table cell.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// anchor is the id GitHub gives a heading: lower case, punctuation but '-'
// and '_' dropped, spaces made '-'.
func anchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
