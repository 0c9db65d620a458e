package httpstep

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"github.com/autocapture/autocapture/capture/internal/stepkit"
	"github.com/autocapture/autocapture/internal/clip"
	"github.com/autocapture/autocapture/vocab"
)

// Config is the config of an `http` step: GET one diagnostic endpoint of the
// alert's instance (vLLM's /version, /server_info, /v1/models …) and keep the body.
// Labels never choose the host, scheme or port beyond the instance label (which
// the targets allow-list checks), nor the endpoint: see httpurl.go.
type Config struct {
	// URL is a fixed absolute URL to GET; it takes no templates. Set URL or Path, not both.
	URL FixedURL `yaml:"url" json:"url,omitempty" jsonschema_description:"A fixed absolute http(s) URL, allow-listed; no templates (use path and query). Set url or path, not both."`
	// Path is joined to http://{{ .Labels.instance }}, e.g. /version. Templates
	// may fill it after its first segment; the rendered path must be plain
	// (letters, digits, -._~/:+,=; no . or .. segments, no //).
	Path URLPath `yaml:"path" json:"path,omitempty" jsonschema_description:"Path on http://<instance label>, e.g. /version. Templates may fill it after a written-out first segment (/v1/models/{{ .Labels.model_name }}); the rendered path may hold only letters, digits and -._~/:+,= and no . or .. or empty segments."`
	// Query adds parameters to the URL; values may be templated (they are
	// percent-encoded), names may not.
	Query QueryParams `yaml:"query" json:"query,omitempty" jsonschema_description:"Query parameters; values may be templated and are percent-encoded, names are written out."`
	// MaxBytes caps the stored body (default 1 MiB); a longer body is cut and
	// reported as truncated.
	MaxBytes int64 `yaml:"max_bytes" json:"max_bytes,omitempty" jsonschema_description:"Cap on the stored body (default 1 MiB); a longer body is cut and reported as truncated."`
}

// httpDefaultMaxBytes is the body cap when a step sets none.
const httpDefaultMaxBytes = 1 << 20

// httpMaxJSONKeys bounds the top-level JSON keys copied into findings.
const httpMaxJSONKeys = 32

// HTTP is the `http` step kind.
type HTTP struct {
	cfg Config
}

var _ vocab.Step = (*HTTP)(nil)

// Kind is the http step kind; capture's registry takes it.
var Kind = vocab.Kind{
	Name:   "http",
	Tier:   vocab.TierMetrics,
	Doc:    "GET a diagnostic endpoint of the alert's instance (allow-listed) and keep the body as an artifact.",
	Config: func() any { return &Config{} },
	Build:  buildHTTP,
}

func buildHTTP(c any) (vocab.Step, error) {
	cfg, ok := c.(*Config)
	if !ok {
		return nil, fmt.Errorf("http: config is %T, want *Config", c)
	}
	if (cfg.URL == "") == (cfg.Path == "") {
		return nil, fmt.Errorf("http: set exactly one of url and path")
	}
	if cfg.URL != "" {
		if _, err := checkFixedURL(string(cfg.URL)); err != nil {
			return nil, fmt.Errorf("http: %w", err)
		}
	}
	if cfg.Path != "" {
		// Rendered by now: labels included, the path must be plain.
		if err := checkPath(string(cfg.Path)); err != nil {
			return nil, fmt.Errorf("http: path %q: %w", cfg.Path, err)
		}
	}
	for k := range cfg.Query {
		if k == "" || strings.Contains(k, "{{") {
			return nil, fmt.Errorf("http: query parameter name %q: names are written out", k)
		}
	}
	if cfg.MaxBytes < 0 {
		return nil, fmt.Errorf("http: max_bytes %d is negative", cfg.MaxBytes)
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = httpDefaultMaxBytes
	}
	out := *cfg
	return &HTTP{cfg: out}, nil
}

// target is the URL this run GETs: the fixed url, or the instance label (exactly
// host:port) with the checked path; then the encoded query.
func (h *HTTP) target(in *vocab.Input) (*url.URL, error) {
	var u *url.URL
	if h.cfg.URL != "" {
		fixed, err := checkFixedURL(string(h.cfg.URL))
		if err != nil {
			return nil, vocab.Errorf(vocab.ReasonBadConfig, "http: %w", err)
		}
		u = fixed
	} else {
		inst := in.Alert.Labels["instance"]
		if inst == "" {
			return nil, vocab.Errorf(vocab.ReasonBadConfig, "http: path %q needs the alert's instance label, which is missing", h.cfg.Path)
		}
		// The label is untrusted: it must be exactly host:port, so it cannot add
		// a path, query or userinfo of its own.
		if !stepkit.ValidHostPort(inst) {
			return nil, vocab.Errorf(vocab.ReasonBadConfig, "http: instance label %q: want host:port", inst)
		}
		u = &url.URL{Scheme: "http", Host: inst, Path: "/" + strings.TrimPrefix(string(h.cfg.Path), "/")}
	}
	withQuery(u, h.cfg.Query)
	return u, nil
}

// Run GETs the endpoint through the allow-listed client and stores the body.
// A refusal by the allow-list comes back as the error and as a `refused` finding.
func (h *HTTP) Run(ctx context.Context, in *vocab.Input) (*vocab.Result, error) {
	if in.Env == nil || in.Env.Targets == nil || in.Env.Store == nil {
		return nil, vocab.Errorf(vocab.ReasonBadConfig, "http: no target client or artifact store configured")
	}
	u, err := h.target(in)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, vocab.Errorf(vocab.ReasonBadConfig, "http: GET %s: %w", u.Redacted(), err)
	}
	req.Header.Set("Accept", "application/json, text/plain;q=0.9, */*;q=0.5")
	resp, err := in.Env.Targets.Do(req)
	if err != nil {
		r := vocab.Classify(err)
		res := &vocab.Result{Summary: fmt.Sprintf("GET %s: %s", u.Redacted(), r), Findings: map[string]any{"url": u.Redacted()}}
		if r == vocab.ReasonRefused {
			res.Findings["refused"] = err.Error()
		}
		return res, &vocab.Error{Reason: r, Err: fmt.Errorf("http: GET %s: %w", u.Redacted(), err)}
	}
	defer resp.Body.Close()
	body, truncated, err := readCapped(resp.Body, h.cfg.MaxBytes)
	if err != nil {
		return nil, &vocab.Error{Reason: vocab.Classify(err), Err: fmt.Errorf("http: GET %s: read body: %w", u.Redacted(), err)}
	}
	ctype := resp.Header.Get("Content-Type")
	findings := map[string]any{"url": u.Redacted(), "status": resp.StatusCode, "content_type": ctype,
		"size": len(body), "truncated": truncated}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return &vocab.Result{Summary: fmt.Sprintf("GET %s: HTTP %d", u.Path, resp.StatusCode), Findings: findings},
			stepkit.HTTPStatusError("http: GET "+u.Redacted(), resp.StatusCode, string(body))
	}
	addJSONFindings(findings, ctype, body, truncated)
	name := "response" + extensionFor(ctype)
	art, err := stepkit.PutArtifact(ctx, in, name, ctype, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	return &vocab.Result{
		Summary:   fmt.Sprintf("GET %s: %d, %d bytes of %s", u.Path, resp.StatusCode, len(body), mediaType(ctype)),
		Findings:  findings,
		Artifacts: []vocab.Artifact{art},
	}, nil
}

// readCapped reads at most max bytes and says whether more were there.
func readCapped(r io.Reader, max int64) ([]byte, bool, error) {
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, false, err
	}
	if int64(len(b)) > max {
		return b[:max], true, nil
	}
	return b, false, nil
}

// addJSONFindings copies a JSON object's top-level keys, and its scalar values,
// into findings: `when` can then read steps.<id>.json.version.
func addJSONFindings(f map[string]any, ctype string, body []byte, truncated bool) {
	if truncated || (mediaType(ctype) != "application/json" && !json.Valid(body)) {
		return
	}
	var obj map[string]any
	if json.Unmarshal(body, &obj) != nil {
		return
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) > httpMaxJSONKeys {
		keys = keys[:httpMaxJSONKeys]
	}
	scalars := map[string]any{}
	for _, k := range keys {
		switch v := obj[k].(type) {
		case string:
			if len(v) > 200 {
				v = clip.String(v, 200) + "…" // whole runes only
			}
			scalars[k] = v
		case float64, bool:
			scalars[k] = v
		}
	}
	f["keys"] = keys
	f["json"] = scalars
}

// mediaType is the content type without parameters, or "unknown".
func mediaType(ctype string) string {
	mt, _, err := mime.ParseMediaType(ctype)
	if err != nil || mt == "" {
		return "unknown"
	}
	return mt
}

// extensionFor picks a file extension people's tools open.
func extensionFor(ctype string) string {
	switch mt := mediaType(ctype); {
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		return ".json"
	case mt == "text/html":
		return ".html"
	case strings.HasPrefix(mt, "text/"):
		return ".txt"
	default:
		return ".bin"
	}
}
