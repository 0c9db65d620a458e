package httpstep_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/vocab"
)

// httpPlaybook is one playbook with one http step whose config is cfg.
func httpPlaybook(cfg string) string {
	return "playbooks:\n  - name: p\n    match: ['alertname=\"A\"']\n    steps:\n      - id: info\n        http: " + cfg + "\n"
}

// TestHTTPTemplatesAreRefusedWhereLabelsWouldChooseTheURL: only path (after a
// fixed first segment) and query values take templates; a templated url, a
// templated query key, a path that lets a label pick its first segment, and a
// path whose fixed text is not a plain path are load errors with file:line:col.
func TestHTTPTemplatesAreRefusedWhereLabelsWouldChooseTheURL(t *testing.T) {
	cases := []struct{ name, cfg, want string }{
		{"templated url", `{url: "http://{{ .Labels.instance }}/version"}`, "pb.yaml:6:"},
		{"templated url names the field", `{url: "http://10.0.0.1/{{ .Labels.p }}"}`, "takes no templates"},
		{"templated query key", `{path: /v1/models, query: {"{{ .Labels.k }}": x}}`, "pb.yaml:6:"},
		{"label picks the whole path", `{path: "{{ .Labels.p }}"}`, "first segment"},
		{"label picks the first segment", `{path: "/v{{ .Labels.p }}/models"}`, "first segment"},
		{"query in the fixed path", `{path: "/version?x={{ .Labels.a }}"}`, `"?"`},
		{"fragment in a fixed path", `{path: "/version#x"}`, `"#"`},
		{"dot-dot in a fixed path", `{path: /v1/../admin}`, `".."`},
		{"escape in a fixed path", `{path: /v1/%2e%2e/admin}`, `"%"`},
		{"userinfo in url", `{url: "http://u:p@10.0.0.1/"}`, "credentials"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := playbooks.LoadFS(fstest.MapFS{"pb.yaml": {Data: []byte(httpPlaybook(c.cfg))}}, "")
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "pb.yaml:6:") {
				t.Fatalf("err = %v\nwant a pb.yaml:6:col error containing %q", err, c.want)
			}
		})
	}
}

// TestHTTPLabelsCannotReshapeTheURL: label values rendered into path may add
// plain segments (model names hold a slash) but never climb out of the fixed
// prefix, add a query, fragment, userinfo, escape or header; a label in a
// query value stays inside that one parameter. A refused value never reaches
// the server.
func TestHTTPLabelsCannotReshapeTheURL(t *testing.T) {
	var mu sync.Mutex
	var seen []*url.URL
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"ok":true}`))
	}))
	defer srv.Close()
	set, err := playbooks.LoadFS(fstest.MapFS{"pb.yaml": {Data: []byte(httpPlaybook(
		`{path: "/v1/models/{{ .Labels.model_name }}", query: {model: "{{ .Labels.model_name }}", fixed: "yes"}}`))}}, "")
	if err != nil {
		t.Fatal(err)
	}
	inst := strings.TrimPrefix(srv.URL, "http://")
	run := func(model string) error {
		t.Helper()
		plans, err := set.Plan(template.Alert{Labels: template.KV{"alertname": "A", "instance": inst, "model_name": model}},
			vocab.Window{Start: time.Now().Add(-time.Minute), End: time.Now()})
		if err != nil || len(plans) != 1 || len(plans[0].Steps) != 1 {
			t.Fatalf("plan: %v %+v", err, plans)
		}
		ps := plans[0].Steps[0]
		if ps.RenderErr != nil {
			return ps.RenderErr
		}
		env, _ := testEnv(t)
		_, err = ps.Step.Run(context.Background(), &vocab.Input{RunID: "r", StepID: "info", Env: env,
			Alert: template.Alert{Labels: template.KV{"instance": inst}}})
		return err
	}
	for _, bad := range []string{"../../admin", "a/../../admin", "..", "a/./b", "x?admin=1", "x#frag", "u@h", "a%2fb",
		"a\r\nX-Injected: 1", "a b", "a//b", `a\b`, "{{x}}"} {
		if err := run(bad); vocab.Classify(err) != vocab.ReasonBadConfig || !strings.Contains(err.Error(), "path") {
			t.Errorf("model_name %q: err %v, want bad-config about the path", bad, err)
		}
	}
	mu.Lock()
	if len(seen) != 0 {
		t.Fatalf("refused label values reached the server: %v", seen)
	}
	mu.Unlock()
	for _, good := range []string{"meta-llama/Llama-3.1-8B-Instruct", "qwen2.5:7b"} {
		if err := run(good); err != nil {
			t.Fatalf("model_name %q: %v", good, err)
		}
	}
	mu.Lock()
	if len(seen) != 2 || seen[0].Path != "/v1/models/meta-llama/Llama-3.1-8B-Instruct" || seen[1].Path != "/v1/models/qwen2.5:7b" ||
		seen[0].Query().Get("model") != "meta-llama/Llama-3.1-8B-Instruct" || seen[0].Query().Get("fixed") != "yes" {
		t.Fatalf("server saw %v", seen)
	}
	mu.Unlock()
	// Query values are encoded: a label with & and # stays one parameter.
	mu.Lock()
	seen = nil
	mu.Unlock()
	set2, err := playbooks.LoadFS(fstest.MapFS{"pb.yaml": {Data: []byte(httpPlaybook(
		`{path: /v1/models, query: {model: "{{ .Labels.model_name }}"}}`))}}, "")
	if err != nil {
		t.Fatal(err)
	}
	set = set2
	if err := run("a&admin=1#x"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0].Path != "/v1/models" || seen[0].Query().Get("model") != "a&admin=1#x" || seen[0].Query().Has("admin") {
		t.Fatalf("server saw %v, want /v1/models with the one parameter model=a&admin=1#x", seen)
	}
}
