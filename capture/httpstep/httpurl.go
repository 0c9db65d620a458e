package httpstep

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
)

// The http step's URL, as a playbook author writes it: the host always comes
// from the alert's instance label (checked against the targets allow-list) or
// from a fixed `url:`; labels may fill only parts of the path after its first
// segment, and query values. Every rendered path is checked again, so a label
// value cannot add `..`, `?`, `#`, `@`, an escape or a line break.

// FixedURL is a URL written out in the playbook: it takes no templates.
type FixedURL string

// URLPath is a path on the alert's instance; templates may fill it after its
// first segment, and the rendered path must be a plain path (pathChars).
type URLPath string

// QueryParams are query parameters; values may be templated (they are
// percent-encoded, so a label stays inside its parameter), names may not.
type QueryParams map[string]string

// templateAction matches one {{ … }} action of a playbook template.
var templateAction = regexp.MustCompile(`(?s)\{\{.*?\}\}`)

// UnmarshalYAML refuses a templated url at load time, at its line and column.
func (u *FixedURL) UnmarshalYAML(n ast.Node) error {
	var s string
	if err := yaml.NodeToValue(n, &s); err != nil {
		return err
	}
	if strings.Contains(s, "{{") {
		return nodeError(n, "url %q takes no templates: a label must not choose the scheme, host or path; "+
			"write path: (joined to the instance label) and query: instead", s)
	}
	*u = FixedURL(s)
	return nil
}

// UnmarshalYAML checks a path's fixed text at load time: the first segment is
// written out, and the rest is a plain path once each template is filled.
func (p *URLPath) UnmarshalYAML(n ast.Node) error {
	var s string
	if err := yaml.NodeToValue(n, &s); err != nil {
		return err
	}
	if err := checkPath(templateAction.ReplaceAllString(s, "x")); err != nil {
		return nodeError(n, "path %q: %v", s, err)
	}
	if i := strings.Index(s, "{{"); i >= 0 && !strings.Contains(strings.TrimPrefix(s[:i], "/"), "/") {
		return nodeError(n, "path %q: the first segment must be written out (e.g. /v1/models/{{ .Labels.model_name }}), so a label cannot choose which endpoint is called", s)
	}
	*p = URLPath(s)
	return nil
}

// UnmarshalYAML refuses templated parameter names at load time.
func (q *QueryParams) UnmarshalYAML(n ast.Node) error {
	var m map[string]string
	if err := yaml.NodeToValue(n, &m); err != nil {
		return err
	}
	for k := range m {
		if strings.Contains(k, "{{") || k == "" {
			return nodeError(n, "query parameter name %q: names are written out; only values take templates", k)
		}
	}
	*q = m
	return nil
}

// nodeError is a load error at n's line and column.
func nodeError(n ast.Node, format string, args ...any) error {
	return &yaml.SyntaxError{Message: fmt.Sprintf(format, args...), Token: n.GetToken()}
}

// pathChars says which bytes a rendered path may hold: letters, digits and
// -._~/:+,= (model names such as meta-llama/Llama-3.1-8B or qwen2.5:7b fit).
func pathChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~/:+,=", c) >= 0
}

// checkPath says why a (rendered) path is not a plain absolute path.
func checkPath(p string) error {
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	for i := 0; i < len(p); i++ {
		if !pathChar(p[i]) {
			return fmt.Errorf("%q is not allowed in a path (only letters, digits and -._~/:+,=)", string(p[i]))
		}
	}
	segs := strings.Split(p[1:], "/")
	for i, seg := range segs {
		switch {
		case seg == "." || seg == "..":
			return fmt.Errorf("a %q segment is not allowed", seg)
		case seg == "" && i < len(segs)-1:
			return fmt.Errorf("an empty segment (//) is not allowed")
		}
	}
	return nil
}

// checkFixedURL says why a url: is not a plain absolute http(s) URL.
func checkFixedURL(raw string) (*url.URL, error) {
	if strings.Contains(raw, "{{") {
		return nil, fmt.Errorf("url %q takes no templates; write path: and query: instead", raw)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("url %q: want an absolute http(s) URL", raw)
	}
	if u.User != nil {
		return nil, fmt.Errorf("url %s: must not carry credentials", u.Redacted())
	}
	return u, nil
}

// withQuery adds the step's parameters to u's own query, encoded.
func withQuery(u *url.URL, q QueryParams) {
	if len(q) == 0 {
		return
	}
	v := u.Query()
	for k, val := range q {
		v.Set(k, val)
	}
	u.RawQuery = v.Encode()
}
