package playbooks

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"text/template"
	"text/template/parse"
	"time"

	amtemplate "github.com/prometheus/alertmanager/template"
	"github.com/prometheus/common/model"

	"github.com/autocapture/autocapture/vocab"
)

// tmpl is one parsed template string of a playbook.
type tmpl struct {
	src string
	t   *template.Template
}

// Funcs are the functions playbook templates may call: Alertmanager's
// template.DefaultFuncs plus promQuote and promDuration, and text/template's
// string builtins (print, printf, println, html, js, urlquery). Every one that
// returns a string fails beyond maxRender bytes, so no chain of calls (a var
// doubled by print again and again) can grow without bound.
func Funcs() template.FuncMap {
	fm := template.FuncMap{
		"print":    fmt.Sprint,
		"printf":   fmt.Sprintf,
		"println":  fmt.Sprintln,
		"html":     template.HTMLEscaper,
		"js":       template.JSEscaper,
		"urlquery": template.URLQueryEscaper,
	}
	for k, v := range amtemplate.DefaultFuncs {
		fm[k] = v
	}
	fm["promQuote"] = PromQuote
	fm["promDuration"] = PromDuration
	for k, v := range fm {
		fm[k] = capped(k, v)
	}
	return fm
}

// maxRender caps what one template string, or one function call in it, may
// produce.
const maxRender = 64 << 10

var errorType = reflect.TypeFor[error]()

// capped wraps a template function so that a string result longer than
// maxRender is an error (a function with an error result reports it there;
// one without panics, which text/template turns into the call's error).
func capped(name string, fn any) any {
	v := reflect.ValueOf(fn)
	ft := v.Type()
	strOut := false
	for i := range ft.NumOut() {
		strOut = strOut || ft.Out(i).Kind() == reflect.String
	}
	if !strOut {
		return fn
	}
	return reflect.MakeFunc(ft, func(args []reflect.Value) []reflect.Value {
		var out []reflect.Value
		if ft.IsVariadic() {
			out = v.CallSlice(args)
		} else {
			out = v.Call(args)
		}
		for _, o := range out {
			if o.Kind() == reflect.String && o.Len() > maxRender {
				err := fmt.Errorf("%s: result over %d bytes", name, maxRender)
				if ft.NumOut() == 2 && ft.Out(1) == errorType {
					return []reflect.Value{reflect.Zero(ft.Out(0)), reflect.ValueOf(&err).Elem()}
				}
				panic(err)
			}
		}
		return out
	}).Interface()
}

// PromQuote returns s as a PromQL double-quoted string literal, safe to splice
// into a label matcher: {instance={{ .Labels.instance | promQuote }}}.
func PromQuote(s string) string {
	// PromQL string literals take Go's escapes (\\, \", \n, \xNN, \uNNNN).
	return strconv.Quote(s)
}

// PromDuration writes d as a PromQL duration (15m, 1h30m, 500ms).
func PromDuration(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	return model.Duration(d).String()
}

// parseTemplate parses one template string with missingkey=error, and refuses
// what could run away at render time (see bounded).
func parseTemplate(name, src string) (*tmpl, error) {
	t, err := template.New(name).Option("missingkey=error").Funcs(Funcs()).Parse(src)
	if err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	if len(t.Templates()) > 1 {
		return nil, fmt.Errorf("template: %q: define and block are not allowed in a playbook string", src)
	}
	if t.Tree != nil && t.Tree.Root != nil {
		if err := bounded(t.Tree.Root); err != nil {
			return nil, fmt.Errorf("template: %q: %w", src, err)
		}
	}
	return &tmpl{src: src, t: t}, nil
}

// rangeable are the fields a range may walk: maps of strings, as long as the
// alert or the playbook makes them.
var rangeable = map[string]bool{"Labels": true, "Annotations": true, "Vars": true}

// bounded refuses the constructs whose work is not bounded by the template and
// the alert: a range over anything but .Labels, .Annotations or .Vars (range
// over an integer, such as .Window.StartUnix, loops that many times), and
// calls of other templates.
func bounded(n parse.Node) error {
	switch x := n.(type) {
	case *parse.ListNode:
		if x == nil {
			return nil
		}
		for _, c := range x.Nodes {
			if err := bounded(c); err != nil {
				return err
			}
		}
	case *parse.RangeNode:
		p := x.Pipe
		ok := p != nil && len(p.Cmds) == 1 && len(p.Cmds[0].Args) == 1
		if ok {
			f, isField := p.Cmds[0].Args[0].(*parse.FieldNode)
			ok = isField && len(f.Ident) == 1 && rangeable[f.Ident[0]]
		}
		if !ok {
			return fmt.Errorf("range: only over .Labels, .Annotations or .Vars, not %s", p)
		}
		return errors.Join(bounded(x.List), bounded(x.ElseList))
	case *parse.IfNode:
		return errors.Join(bounded(x.List), bounded(x.ElseList))
	case *parse.WithNode:
		return errors.Join(bounded(x.List), bounded(x.ElseList))
	case *parse.TemplateNode:
		return fmt.Errorf("template %q: calling templates is not allowed in a playbook string", x.Name)
	}
	return nil
}

// render executes the template over data; beyond maxRender bytes it fails.
func (t *tmpl) render(data *TemplateData) (string, error) {
	b := &cappedWriter{}
	if err := t.t.Execute(b, data); err != nil {
		return "", fmt.Errorf("render %q: %w", t.src, err)
	}
	return b.String(), nil
}

// cappedWriter is a strings.Builder that refuses to grow beyond maxRender.
type cappedWriter struct{ strings.Builder }

func (w *cappedWriter) Write(p []byte) (int, error) {
	if w.Len()+len(p) > maxRender {
		return 0, fmt.Errorf("output over %d bytes", maxRender)
	}
	return w.Builder.Write(p)
}

// TemplateData is what playbook templates see: the alert, the playbook's vars,
// and the alert window.
type TemplateData struct {
	Status       string
	Labels       amtemplate.KV
	Annotations  amtemplate.KV
	StartsAt     time.Time
	EndsAt       time.Time
	Fingerprint  string
	GeneratorURL string
	Vars         map[string]string
	Window       WindowData

	varErr error // with: vars of a preset's use that failed (see withVars)
}

// WindowData is the alert window in the shapes PromQL wants.
type WindowData struct {
	Start, End         time.Time
	Range              string // PromQL duration of End-Start, e.g. 15m
	StartUnix, EndUnix int64
}

// NewTemplateData builds the template data of one alert and window (Vars empty).
func NewTemplateData(a amtemplate.Alert, w vocab.Window) *TemplateData {
	labels, ann := a.Labels, a.Annotations
	if labels == nil {
		labels = amtemplate.KV{}
	}
	if ann == nil {
		ann = amtemplate.KV{}
	}
	return &TemplateData{Status: a.Status, Labels: labels, Annotations: ann,
		StartsAt: a.StartsAt, EndsAt: a.EndsAt, Fingerprint: a.Fingerprint,
		GeneratorURL: a.GeneratorURL, Vars: map[string]string{},
		Window: WindowData{Start: w.Start, End: w.End, Range: PromDuration(w.End.Sub(w.Start).Round(time.Second)),
			StartUnix: w.Start.Unix(), EndUnix: w.End.Unix()}}
}

// renderTree renders every template string of a config tree, returning a copy.
func renderTree(v any, ts map[string]*tmpl, data *TemplateData) (any, error) {
	switch x := v.(type) {
	case string:
		t, ok := ts[x]
		if !ok {
			return x, nil
		}
		return t.render(data)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			key := k
			if t, ok := ts[k]; ok { // a templated key is rendered like a value
				rk, err := t.render(data)
				if err != nil {
					return nil, fmt.Errorf("key %s: %w", k, err)
				}
				key = rk
			}
			r, err := renderTree(e, ts, data)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			out[key] = r
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			r, err := renderTree(e, ts, data)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			out[i] = r
		}
		return out, nil
	}
	return v, nil
}
