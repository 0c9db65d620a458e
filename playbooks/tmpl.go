package playbooks

import (
	"fmt"
	"strconv"
	"strings"
	"text/template"
	"time"

	amtemplate "github.com/prometheus/alertmanager/template"
	"github.com/prometheus/common/model"

	"github.com/autocapture/autocapture/capture"
)

// tmpl is one parsed template string of a playbook.
type tmpl struct {
	src string
	t   *template.Template
}

// Funcs are the functions playbook templates may call: Alertmanager's
// template.DefaultFuncs plus promQuote and promDuration.
func Funcs() template.FuncMap {
	fm := template.FuncMap{}
	for k, v := range amtemplate.DefaultFuncs {
		fm[k] = v
	}
	fm["promQuote"] = PromQuote
	fm["promDuration"] = PromDuration
	return fm
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

// parseTemplate parses one template string with missingkey=error.
func parseTemplate(name, src string) (*tmpl, error) {
	t, err := template.New(name).Option("missingkey=error").Funcs(Funcs()).Parse(src)
	if err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	return &tmpl{src: src, t: t}, nil
}

// render executes the template over data.
func (t *tmpl) render(data *TemplateData) (string, error) {
	var b strings.Builder
	if err := t.t.Execute(&b, data); err != nil {
		return "", fmt.Errorf("render %q: %w", t.src, err)
	}
	return b.String(), nil
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
func NewTemplateData(a amtemplate.Alert, w capture.Window) *TemplateData {
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
