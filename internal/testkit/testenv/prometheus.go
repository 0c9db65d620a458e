package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Prometheus is a running Prometheus server started by StartPrometheus.
type Prometheus struct {
	// URL is its base URL, http://127.0.0.1:PORT.
	URL string
	// Dir holds its configuration, copied rule files and TSDB.
	Dir string
	// ConfigPath is the prometheus.yml it was started with; rewrite it and
	// call Reload to change it.
	ConfigPath string
	// Proc is the server process.
	Proc *Process
}

// PrometheusOptions say what a Prometheus started by StartPrometheus scrapes
// and evaluates.
type PrometheusOptions struct {
	// ScrapeTargets are host:port targets scraped as job "vllm" at /metrics.
	ScrapeTargets []string
	// ScrapeInterval defaults to 1s.
	ScrapeInterval time.Duration
	// EvaluationInterval defaults to 1s.
	EvaluationInterval time.Duration
	// RuleFiles are copied into the server's directory and listed under
	// rule_files.
	RuleFiles []string
	// AlertmanagerURL, when set, is where alerts are sent.
	AlertmanagerURL string
	// AlertResendDelay is --rules.alert.resend-delay, 1s by default here
	// (Prometheus says 1m). Prometheus learns its Alertmanagers only ~5 s
	// after start and drops the alerts it fired before; they reach
	// Alertmanager on the next resend.
	AlertResendDelay time.Duration
	// Exemplars turns on exemplar storage.
	Exemplars bool
	// ExtraScrapeConfigs is raw YAML, a list of scrape configs, appended
	// under scrape_configs; its own indentation does not matter.
	ExtraScrapeConfigs string
}

// Sample is one element of an instant query result.
type Sample struct {
	// Labels are the series labels, __name__ included when present.
	Labels map[string]string
	// Value is the sample value.
	Value float64
}

// StartPrometheus starts Prometheus on a free 127.0.0.1 port with the
// lifecycle API on and its TSDB in a temporary directory, and waits for
// /-/ready. Ready does not mean scraped: Prometheus 2.42 hands its targets
// (scrape and Alertmanager) over only every 5 s, so the first scrape comes
// ~5 s after ready. Use WaitUp before asserting.
func StartPrometheus(t testing.TB, o PrometheusOptions) *Prometheus {
	t.Helper()
	bin := Tool(t, "prometheus")
	dir := t.TempDir()
	cfg, err := prometheusConfig(dir, o)
	if err != nil {
		t.Fatalf("testenv: prometheus config: %v", err)
	}
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	prom := &Prometheus{Dir: dir, ConfigPath: cfgPath}
	prom.Proc = startServer(t, "prometheus", 30*time.Second, func() (*Process, string) {
		port := FreePort(t)
		prom.URL = fmt.Sprintf("http://127.0.0.1:%d", port)
		args := []string{
			"--config.file=" + cfgPath,
			"--storage.tsdb.path=" + filepath.Join(dir, "data"),
			"--web.listen-address=" + fmt.Sprintf("127.0.0.1:%d", port),
			"--web.external-url=" + prom.URL,
			"--web.enable-lifecycle",
		}
		if o.AlertResendDelay == 0 {
			o.AlertResendDelay = time.Second
		}
		args = append(args, "--rules.alert.resend-delay="+promDuration(o.AlertResendDelay))
		if o.Exemplars {
			args = append(args, "--enable-feature=exemplar-storage")
		}
		return StartProcess(t, "prometheus", exec.Command(bin, args...)), prom.URL + "/-/ready"
	})
	return prom
}

// prometheusConfig renders prometheus.yml for o, copying rule files into dir.
func prometheusConfig(dir string, o PrometheusOptions) (string, error) {
	if o.ScrapeInterval == 0 {
		o.ScrapeInterval = time.Second
	}
	if o.EvaluationInterval == 0 {
		o.EvaluationInterval = time.Second
	}
	var b strings.Builder
	fmt.Fprintf(&b, "global:\n  scrape_interval: %s\n  evaluation_interval: %s\n",
		promDuration(o.ScrapeInterval), promDuration(o.EvaluationInterval))
	if len(o.RuleFiles) > 0 {
		b.WriteString("rule_files:\n")
		for i, src := range o.RuleFiles {
			dst := filepath.Join(dir, fmt.Sprintf("rules-%d-%s", i, filepath.Base(src)))
			if err := copyFile(src, dst); err != nil {
				return "", fmt.Errorf("rule file: %w", err)
			}
			fmt.Fprintf(&b, "  - %s\n", quote(dst))
		}
	}
	if o.AlertmanagerURL != "" {
		u, err := url.Parse(o.AlertmanagerURL)
		if err != nil || u.Host == "" {
			return "", fmt.Errorf("alertmanager URL %q: not an absolute URL", o.AlertmanagerURL)
		}
		fmt.Fprintf(&b, "alerting:\n  alertmanagers:\n    - scheme: %s\n", u.Scheme)
		if p := strings.TrimSuffix(u.Path, "/"); p != "" {
			fmt.Fprintf(&b, "      path_prefix: %s\n", quote(p))
		}
		fmt.Fprintf(&b, "      static_configs:\n        - targets: [%s]\n", quote(u.Host))
	}
	extra := indent(dedent(o.ExtraScrapeConfigs), "  ")
	if len(o.ScrapeTargets) == 0 && extra == "" {
		b.WriteString("scrape_configs: []\n")
		return b.String(), nil
	}
	b.WriteString("scrape_configs:\n")
	if len(o.ScrapeTargets) > 0 {
		b.WriteString("  - job_name: vllm\n    metrics_path: /metrics\n    static_configs:\n      - targets:\n")
		for _, tg := range o.ScrapeTargets {
			fmt.Fprintf(&b, "          - %s\n", quote(tg))
		}
	}
	b.WriteString(extra)
	return b.String(), nil
}

// promDuration renders d the way Prometheus parses durations ("1500ms", "1s").
func promDuration(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return fmt.Sprintf("%dms", d/time.Millisecond)
}

// quote renders s as a YAML double-quoted string (JSON strings are valid YAML).
func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// dedent removes the indentation common to all non-blank lines of s.
func dedent(s string) string {
	lines := strings.Split(strings.TrimRight(s, " \t\n"), "\n")
	common := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		n := len(l) - len(strings.TrimLeft(l, " "))
		if common < 0 || n < common {
			common = n
		}
	}
	if common <= 0 {
		return strings.Join(lines, "\n")
	}
	for i, l := range lines {
		if len(l) >= common {
			lines[i] = l[common:]
		}
	}
	return strings.Join(lines, "\n")
}

// indent prefixes every non-blank line of s and ends it with a newline.
func indent(s, prefix string) string {
	if strings.TrimSpace(s) == "" {
		return ""
	}
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			b.WriteString(prefix)
		}
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}

// WaitUp waits until Prometheus has scraped target (host:port) successfully,
// that is until up{instance=target} is 1, and fails the test after timeout.
func (p *Prometheus) WaitUp(t testing.TB, target string, timeout time.Duration) {
	t.Helper()
	q := fmt.Sprintf("up{instance=%s}", quote(target))
	deadline := time.Now().Add(timeout)
	last := "no result"
	for {
		ss, err := p.TryQuery(context.Background(), q)
		switch {
		case err != nil:
			last = err.Error()
		case len(ss) == 0:
			last = "not scraped yet"
		default:
			for _, s := range ss {
				if s.Value == 1 {
					return
				}
			}
			last = fmt.Sprintf("up=%v", ss[0].Value)
		}
		if p.Proc.Exited() || time.Now().After(deadline) {
			t.Fatalf("testenv: prometheus %s: target %s not up after %v (%s)", p.URL, target, timeout, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Query runs an instant PromQL query and fails the test on any error. A
// scalar result comes back as one sample without labels.
func (p *Prometheus) Query(t testing.TB, promql string) []Sample {
	t.Helper()
	ss, err := p.TryQuery(context.Background(), promql)
	if err != nil {
		t.Fatalf("testenv: prometheus query %q: %v", promql, err)
	}
	return ss
}

// TryQuery is Query returning its error, for polling.
func (p *Prometheus) TryQuery(ctx context.Context, promql string) ([]Sample, error) {
	u := p.URL + "/api/v1/query?query=" + url.QueryEscape(promql)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("%s: %w: %.200s", resp.Status, err, body)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s: %s", resp.Status, r.Error)
	}
	return decodeResult(r.Data.ResultType, r.Data.Result)
}

// decodeResult turns a vector or scalar result into samples.
func decodeResult(typ string, raw json.RawMessage) ([]Sample, error) {
	switch typ {
	case "vector":
		var v []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, err
		}
		out := make([]Sample, 0, len(v))
		for _, e := range v {
			f, err := sampleValue(e.Value)
			if err != nil {
				return nil, err
			}
			out = append(out, Sample{Labels: e.Metric, Value: f})
		}
		return out, nil
	case "scalar":
		var v [2]any
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, err
		}
		f, err := sampleValue(v)
		if err != nil {
			return nil, err
		}
		return []Sample{{Labels: map[string]string{}, Value: f}}, nil
	default:
		return nil, fmt.Errorf("result type %q: use an instant vector or scalar query", typ)
	}
}

func sampleValue(v [2]any) (float64, error) {
	s, ok := v[1].(string)
	if !ok {
		return 0, fmt.Errorf("sample value %v is not a string", v[1])
	}
	return strconv.ParseFloat(s, 64)
}

// Reload asks Prometheus to reread ConfigPath (POST /-/reload).
func (p *Prometheus) Reload(t testing.TB) {
	t.Helper()
	resp, err := http.Post(p.URL+"/-/reload", "", nil)
	if err != nil {
		t.Fatalf("testenv: prometheus reload: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("testenv: prometheus reload: %s: %s", resp.Status, b)
	}
}
