package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
)

// The self-monitoring files may only name series the daemon exports: each
// expression is parsed as Prometheus would, and each metric name it selects
// must be on the /metrics of a running daemon (the image's own binary).

const (
	alertsFile    = "prometheus/autocapture-alerts.yml"
	dashboardFile = "grafana/autocapture.json"
)

// grafanaVars stand for the variables the dashboard's expressions use, with
// values Grafana could give them.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "${job}", ".+", "$job", ".+")

// exprSource is one expression and where it is from.
type exprSource struct{ where, expr string }

// dashboardPanel is the part of a Grafana panel this test reads.
type dashboardPanel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []dashboardPanel `json:"panels"`
}

func dashboardExprs(t *testing.T) []exprSource {
	t.Helper()
	return dashboardExprsOf(t, dashboardFile)
}

// dashboardExprsOf checks a dashboard's panels (unique ids, titles, queries on
// the ${datasource} variable) and returns their expressions, each with where
// it is ("panel \"title\" query A").
func dashboardExprsOf(t *testing.T, dashboardFile string) []exprSource {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string           `json:"uid"`
		Title  string           `json:"title"`
		Panels []dashboardPanel `json:"panels"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("%s: no uid or title", dashboardFile)
	}
	var out []exprSource
	ids := map[int]string{}
	var walk func(ps []dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			if prev, dup := ids[p.ID]; dup || p.ID == 0 {
				t.Errorf("panel %q: id %d (also %q)", p.Title, p.ID, prev)
			}
			ids[p.ID] = p.Title
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if p.Title == "" || len(p.Targets) == 0 {
				t.Errorf("panel %d: title %q, %d queries", p.ID, p.Title, len(p.Targets))
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: not on the ${datasource} variable", p.Title)
			}
			for _, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("panel %q query %s: empty expression", p.Title, tg.RefID)
				}
				out = append(out, exprSource{where: fmt.Sprintf("panel %q query %s", p.Title, tg.RefID), expr: tg.Expr})
			}
		}
	}
	walk(d.Panels)
	return out
}

func alertExprs(t *testing.T) []exprSource {
	t.Helper()
	b, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	var out []exprSource
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			out = append(out, exprSource{where: "alert " + r.Alert, expr: r.Expr})
		}
	}
	return out
}

// metricNames parses e (Grafana variables replaced) and returns the metric
// names its selectors name.
func metricNames(e exprSource) ([]string, error) {
	expr, err := parser.NewParser(parser.Options{}).ParseExpr(grafanaVars.Replace(e.expr))
	if err != nil {
		return nil, fmt.Errorf("%s: %q: %w", e.where, e.expr, err)
	}
	var names []string
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		if name == "" {
			err = fmt.Errorf("%s: a selector without a metric name: %s", e.where, vs)
		}
		names = append(names, name)
		return nil
	})
	return names, err
}

func TestSelfMonitoringExpressionsParse(t *testing.T) {
	parallel(t)
	alerts, panels := alertExprs(t), dashboardExprs(t)
	if len(alerts) < 8 || len(panels) < 20 {
		t.Fatalf("%d alert and %d panel expressions", len(alerts), len(panels))
	}
	for _, e := range append(alerts, panels...) {
		names, err := metricNames(e)
		if err != nil {
			t.Error(err)
			continue
		}
		if len(names) == 0 {
			t.Errorf("%s: %q selects no metric", e.where, e.expr)
		}
	}
	out := run(t, "promtool", "check", "rules", alertsFile)
	if want := fmt.Sprintf("SUCCESS: %d rules found", len(alerts)); !strings.Contains(out, want) {
		t.Errorf("promtool check rules %s:\n%s", alertsFile, out)
	}
}

// TestSelfMonitoringMetricsExist starts the image's binary on S3 (versitygw)
// with the console notifier and a one-step playbook, sends it a webhook
// without the token and one with, waits for the run, and checks that every
// metric the alert rules and the dashboard name is on its /metrics
// (a histogram's _bucket, _sum and _count by its family).
func TestSelfMonitoringMetricsExist(t *testing.T) {
	parallel(t)
	bin := imageBinary(t)
	srv := testenv.StartVersityGW(t)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	}))
	defer target.Close()

	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	secret := write("s3-secret", srv.SecretAccessKey)
	pb := write("playbook.yaml", fmt.Sprintf("playbooks:\n  - name: self\n    match:\n      - alertname=\"SelfMonitoring\"\n"+
		"    steps:\n      - id: fetch\n        http: {url: %q}\n", target.URL+"/x"))
	port := testenv.FreePort(t)
	const token = "self-monitoring-token"
	cfg := write("autocapture.yaml", fmt.Sprintf(`web:
  listen_address: 127.0.0.1:%d
  auth:
    bearer_token: %q
storage:
  path: %q
  backend: s3
  s3:
    bucket: %s
    endpoint: %s
    path_style: true
    region: %s
    access_key_id: %s
    secret_access_key_file: %s
prometheus:
  url: http://127.0.0.1:%d
playbooks: [%q]
`, port, token, filepath.Join(dir, "data"), srv.Bucket, srv.Endpoint, srv.Region, srv.AccessKeyID, secret, testenv.FreePort(t), pb))

	testenv.StartProcess(t, "autocapture-self", exec.Command(bin, "serve", "--config.file", cfg)).
		WaitHTTP(t, fmt.Sprintf("http://127.0.0.1:%d/-/ready", port), 30*time.Second)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	call := func(method, path, auth string, body []byte) (int, []byte) {
		req, _ := http.NewRequest(method, base+path, bytes.NewReader(body))
		if len(body) > 0 {
			req.Header.Set("Content-Type", "application/json")
		}
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	hook := []byte(fmt.Sprintf(`{"version":"4","groupKey":"{}:{}","status":"firing","receiver":"autocapture","alerts":[`+
		`{"status":"firing","labels":{"alertname":"SelfMonitoring","instance":"127.0.0.1:1"},"annotations":{},"startsAt":%q,`+
		`"endsAt":"0001-01-01T00:00:00Z","fingerprint":"5e1f5e1f5e1f5e1f"}]}`, time.Now().Add(-time.Minute).UTC().Format(time.RFC3339Nano)))
	if code, _ := call("POST", "/hooks/alertmanager", "", hook); code != http.StatusUnauthorized {
		t.Fatalf("webhook without the token: %d", code)
	}
	if code, b := call("POST", "/hooks/alertmanager", token, hook); code != 200 {
		t.Fatalf("webhook: %d %s", code, b)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, b := call("GET", "/api/v1/runs?alertname=SelfMonitoring", token, nil)
		var page struct {
			Runs []struct{ Status string } `json:"runs"`
		}
		_ = json.Unmarshal(b, &page)
		if len(page.Runs) == 1 && page.Runs[0].Status != "queued" && page.Runs[0].Status != "running" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run did not finish: %s", b)
		}
		time.Sleep(100 * time.Millisecond)
	}

	code, b := call("GET", "/metrics", "", nil)
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	tp := expfmt.NewTextParser(model.UTF8Validation)
	families, err := tp.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	exported := func(name string) bool {
		if _, ok := families[name]; ok {
			return true
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok {
				if f, ok := families[base]; ok && (f.GetType() == dto.MetricType_HISTOGRAM || suffix != "_bucket" && f.GetType() == dto.MetricType_SUMMARY) {
					return true
				}
			}
		}
		return false
	}
	used := map[string][]string{}
	for _, e := range append(alertExprs(t), dashboardExprs(t)...) {
		names, err := metricNames(e)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			used[n] = append(used[n], e.where)
		}
	}
	var missing []string
	for n, where := range used {
		if !exported(n) {
			missing = append(missing, fmt.Sprintf("%s (%s)", n, strings.Join(where, "; ")))
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("not on the daemon's /metrics: %s", m)
	}
	if len(missing) > 0 {
		return
	}
	t.Logf("%d metric names used by %s and %s, all exported", len(used), alertsFile, dashboardFile)
}
