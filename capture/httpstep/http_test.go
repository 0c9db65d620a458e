package httpstep_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/capture"
	"github.com/autocapture/autocapture/capture/httpstep"
	"github.com/autocapture/autocapture/vocab"
)

func TestHTTPStep(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/version":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"version":"0.11.2","build":{"x":1}}`)
		case "/big":
			io.WriteString(w, strings.Repeat("a", 100))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	inst := strings.TrimPrefix(srv.URL, "http://")
	cases := []struct {
		name       string
		cfg        httpstep.Config
		instance   string
		reason     vocab.Reason
		body       string
		findings   map[string]any
		noArtifact bool
	}{
		{"json version by path", httpstep.Config{Path: "/version"}, inst, "", `{"version":"0.11.2","build":{"x":1}}`,
			map[string]any{"status": 200, "content_type": "application/json", "truncated": false}, false},
		{"truncated body", httpstep.Config{URL: httpstep.FixedURL(srv.URL + "/big"), MaxBytes: 10}, "", "", "aaaaaaaaaa",
			map[string]any{"size": 10, "truncated": true}, false},
		{"not found is upstream-4xx", httpstep.Config{Path: "server_info"}, inst, vocab.ReasonUpstream4xx, "",
			map[string]any{"status": 404}, true},
		{"label pointing at another host", httpstep.Config{Path: "/version"}, "10.20.30.40:8000", vocab.ReasonRefused, "",
			nil, true},
		{"metadata address", httpstep.Config{URL: "http://169.254.169.254/latest/meta-data/"}, "", vocab.ReasonRefused, "",
			nil, true},
		{"missing instance label", httpstep.Config{Path: "/version"}, "", vocab.ReasonBadConfig, "", nil, true},
		{"server down is unreachable, not refused", httpstep.Config{Path: "/version"}, deadAddr(t), vocab.ReasonUnreachable, "",
			nil, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env, st := testEnv(t)
			step := buildStep(t, "http", func(h *httpstep.Config) { *h = c.cfg })
			labels := template.KV{"alertname": "VLLMHighTTFT"}
			if c.instance != "" {
				labels["instance"] = c.instance
			}
			in := &vocab.Input{RunID: "r1", StepID: "version", Alert: template.Alert{Labels: labels}, Env: env}
			res, err := step.Run(context.Background(), in)
			if got := vocab.Classify(err); got != c.reason {
				t.Fatalf("reason = %q (err %v), want %q", got, err, c.reason)
			}
			if c.reason == vocab.ReasonRefused && (res == nil || res.Findings["refused"] == nil) {
				t.Fatalf("refusal not reported as a finding: %+v", res)
			}
			if c.reason != vocab.ReasonRefused && res != nil && res.Findings["refused"] != nil {
				t.Fatalf("a %q failure reported as an allow-list refusal: %v", c.reason, res.Findings["refused"])
			}
			for k, want := range c.findings {
				if res.Findings[k] != want {
					t.Errorf("finding %s = %v, want %v", k, res.Findings[k], want)
				}
			}
			if c.noArtifact {
				if res != nil && len(res.Artifacts) > 0 {
					t.Fatalf("artifacts stored on failure: %+v", res.Artifacts)
				}
				return
			}
			if len(res.Artifacts) != 1 || readArtifact(t, st, res.Artifacts[0].Key) != c.body {
				t.Fatalf("artifact = %+v, want body %q", res.Artifacts, c.body)
			}
		})
	}
}

// deadAddr is a loopback host:port nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func TestHTTPStepJSONFindings(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		io.WriteString(w, `{"version":"0.11.2","build":{"x":1},"dev":true}`)
	}))
	defer srv.Close()
	env, _ := testEnv(t)
	step := buildStep(t, "http", func(h *httpstep.Config) { h.URL = httpstep.FixedURL(srv.URL + "/version") })
	res, err := step.Run(context.Background(), &vocab.Input{RunID: "r", StepID: "v", Env: env})
	if err != nil {
		t.Fatal(err)
	}
	keys, _ := res.Findings["keys"].([]string)
	if strings.Join(keys, ",") != "build,dev,version" {
		t.Errorf("keys = %v", res.Findings["keys"])
	}
	js, _ := res.Findings["json"].(map[string]any)
	if js["version"] != "0.11.2" || js["dev"] != true || js["build"] != nil {
		t.Errorf("json scalars = %v", js)
	}
	if !strings.HasSuffix(res.Artifacts[0].Key, "/r/_~e3b0c442/v/response.json") {
		t.Errorf("artifact key = %q", res.Artifacts[0].Key)
	}
}

func TestHTTPBuildRejectsBadConfig(t *testing.T) {
	k, _ := capture.Lookup("http")
	for name, cfg := range map[string]*httpstep.Config{
		"neither":  {},
		"both":     {URL: "http://a/", Path: "/b"},
		"negative": {Path: "/v", MaxBytes: -1},
	} {
		if _, err := k.Build(cfg); err == nil {
			t.Errorf("%s: Build accepted %+v", name, cfg)
		}
	}
}

// TestHTTPInstanceLabelCannotChangeThePath: the instance label is untrusted; one
// carrying a path, query or userinfo is refused, never requested.
func TestHTTPInstanceLabelCannotChangeThePath(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	env, _ := testEnv(t)
	env.Targets = srv.Client()
	host := strings.TrimPrefix(srv.URL, "http://")
	for _, inst := range []string{host + "/admin/secret?x=", "user@" + host, host + "#frag"} {
		step := buildStep(t, "http", func(cfg *httpstep.Config) { cfg.Path = "/version" })
		_, err := step.Run(context.Background(), &vocab.Input{RunID: "r", StepID: "v", Env: env,
			Alert: template.Alert{Labels: template.KV{"instance": inst}}})
		if vocab.Classify(err) != vocab.ReasonBadConfig {
			t.Errorf("instance %q: err %v, want bad-config", inst, err)
		}
	}
	if hits.Load() != 0 {
		t.Fatalf("%d requests reached the server", hits.Load())
	}
}
