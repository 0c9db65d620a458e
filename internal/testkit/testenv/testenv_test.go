package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

func TestMain(m *testing.M) { Main(m) }

// eventually polls cond every 50 ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestPrometheusConfigExtraScrapeConfigs(t *testing.T) {
	cfg, err := prometheusConfig(t.TempDir(), PrometheusOptions{
		ScrapeTargets:      []string{"127.0.0.1:1"},
		ScrapeInterval:     1500 * time.Millisecond,
		ExtraScrapeConfigs: "\n    - job_name: extra\n      static_configs:\n        - targets: [\"127.0.0.1:2\"]\n",
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"scrape_interval: 1500ms", "  - job_name: vllm\n", "  - job_name: extra\n    static_configs:\n"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("config lacks %q:\n%s", want, cfg)
		}
	}
}

func TestFreePortNeverRepeats(t *testing.T) {
	seen := map[int]bool{}
	for range 200 {
		p := FreePort(t)
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}

// ProcessTempDir's folder outlives the test that made it (t.TempDir's does
// not), lies in this process's folder, which Main removes, and is new each call.
func TestProcessTempDir(t *testing.T) {
	var dir string
	t.Run("made", func(t *testing.T) {
		dir = ProcessTempDir(t)
		if err := os.WriteFile(filepath.Join(dir, "shared"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := os.Stat(filepath.Join(dir, "shared")); err != nil {
		t.Fatalf("after the test that made it: %v", err)
	}
	if filepath.Dir(dir) != procDir {
		t.Errorf("%s is not in the process folder %s, which Main removes", dir, procDir)
	}
	if other := ProcessTempDir(t); other == dir {
		t.Errorf("two calls gave the same folder %s", dir)
	}
}

func TestProcess(t *testing.T) {
	t.Parallel()
	const hello = "./internal/testkit/testenv/testdata/hello"
	t.Run("BuildBinary builds once", func(t *testing.T) {
		start := time.Now()
		bin := BuildBinary(t, hello)
		t.Logf("BuildBinary took %v", time.Since(start))
		if again := BuildBinary(t, hello); again != bin {
			t.Errorf("second BuildBinary = %q, want cached %q", again, bin)
		}
	})

	startHello := func(t *testing.T) (*Process, string) {
		bin := BuildBinary(t, hello)
		addr := fmt.Sprintf("127.0.0.1:%d", FreePort(t))
		p := StartProcess(t, "hello", exec.Command(bin, "-addr", addr))
		p.WaitHTTP(t, "http://"+addr+"/", 10*time.Second)
		return p, addr
	}

	t.Run("Stop sends SIGTERM", func(t *testing.T) {
		p, _ := startHello(t)
		p.Stop()
		if err := p.Err(); err != nil {
			t.Errorf("exit: %v, want clean exit after SIGTERM", err)
		}
		if logs := p.Logs(); !strings.Contains(logs, "got SIGTERM") {
			t.Errorf("logs %q lack the SIGTERM message", logs)
		}
	})

	t.Run("Kill9 kills", func(t *testing.T) {
		p, addr := startHello(t)
		p.Kill9()
		var ee *exec.ExitError
		if err := p.Err(); !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("exit: %v, want killed by SIGKILL", err)
		}
		if _, err := http.Get("http://" + addr + "/"); err == nil {
			t.Error("server still answers after Kill9")
		}
		p.Stop() // harmless after exit
	})

	t.Run("Kill9 kills the whole group", func(t *testing.T) {
		p := StartProcess(t, "sh", exec.Command("sh", "-c", "sleep 60 & echo child=$!; wait"))
		var child int
		eventually(t, 5*time.Second, "child pid in logs", func() bool {
			_, s, ok := strings.Cut(p.Logs(), "child=")
			if !ok || !strings.HasSuffix(s, "\n") {
				return false
			}
			child, _ = strconv.Atoi(strings.TrimSpace(s))
			return child > 0
		})
		p.Kill9()
		eventually(t, 5*time.Second, "grandchild gone", func() bool { return !alive(child) })
	})

	t.Run("WaitHTTP fails fast when the process dies", func(t *testing.T) {
		p := StartProcess(t, "false", exec.Command("false"))
		if err := pollHTTP("http://127.0.0.1:1/", 30*time.Second, p.Done()); !errors.Is(err, errExited) {
			t.Errorf("pollHTTP = %v, want errExited", err)
		}
	})
}

// alive reports whether pid is running (a zombie counts as dead).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z")
}

func TestPrometheus(t *testing.T) {
	t.Parallel()
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, "# TYPE autocapture_testenv_value gauge\nautocapture_testenv_value 42\n")
	}))
	defer target.Close()
	host := strings.TrimPrefix(target.URL, "http://")
	rules := filepath.Join(t.TempDir(), "rules.yml")
	if err := os.WriteFile(rules, []byte("groups:\n  - name: test\n    rules:\n      - record: autocapture_testenv_value:doubled\n        expr: autocapture_testenv_value * 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	prom := StartPrometheus(t, PrometheusOptions{ScrapeTargets: []string{host}, RuleFiles: []string{rules}, Exemplars: true})
	t.Logf("prometheus ready in %v", time.Since(start))
	prom.WaitUp(t, host, 15*time.Second)
	t.Logf("prometheus scraped the target after %v", time.Since(start))

	got := prom.Query(t, "autocapture_testenv_value")
	if len(got) != 1 || got[0].Value != 42 || got[0].Labels["job"] != "vllm" || got[0].Labels["instance"] != host {
		t.Errorf("query = %+v, want one sample 42 with job=vllm instance=%s", got, host)
	}
	eventually(t, 10*time.Second, "recording rule", func() bool {
		ss, err := prom.TryQuery(context.Background(), "autocapture_testenv_value:doubled")
		return err == nil && len(ss) == 1 && ss[0].Value == 84
	})
	if s := prom.Query(t, "scalar(autocapture_testenv_value)"); len(s) != 1 || s[0].Value != 42 {
		t.Errorf("scalar query = %+v, want 42", s)
	}
	prom.Reload(t)
	resp, err := http.Get(prom.URL + "/api/v1/query_exemplars?query=autocapture_testenv_value")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("query_exemplars with exemplar storage on: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}

// webhookPayload is the part of Alertmanager's webhook body the tests check.
type webhookPayload struct {
	Version     string `json:"version"`
	Status      string `json:"status"`
	ExternalURL string `json:"externalURL"`
	Alerts      []struct {
		Status      string            `json:"status"`
		Labels      map[string]string `json:"labels"`
		Fingerprint string            `json:"fingerprint"`
	} `json:"alerts"`
}

// webhookReceiver starts an httptest server that forwards each webhook body.
func webhookReceiver(t *testing.T) (url string, got <-chan webhookPayload) {
	ch := make(chan webhookPayload, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p webhookPayload
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			t.Errorf("webhook body: %v", err)
		}
		ch <- p
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/hook", ch
}

func alertmanagerConfig(hook string) string {
	return fmt.Sprintf(`route:
  receiver: hook
  group_by: [alertname]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: hook
    webhook_configs:
      - url: %q
        send_resolved: true
`, hook)
}

func waitWebhook(t *testing.T, got <-chan webhookPayload, alertname string) webhookPayload {
	t.Helper()
	timeout := time.After(15 * time.Second)
	for {
		select {
		case p := <-got:
			if len(p.Alerts) > 0 && p.Alerts[0].Labels["alertname"] == alertname {
				return p
			}
		case <-timeout:
			t.Fatalf("no webhook for %s within 15s", alertname)
		}
	}
}

func TestAlertmanager(t *testing.T) {
	t.Parallel()
	hook, got := webhookReceiver(t)
	start := time.Now()
	am := StartAlertmanager(t, alertmanagerConfig(hook))
	t.Logf("alertmanager ready in %v", time.Since(start))

	posted := time.Now()
	am.PostAlerts(t, PostableAlert{
		Labels:       map[string]string{"alertname": "TestenvAlert", "severity": "page"},
		Annotations:  map[string]string{"summary": "posted by testenv"},
		GeneratorURL: "http://127.0.0.1/generator",
	})
	p := waitWebhook(t, got, "TestenvAlert")
	t.Logf("webhook arrived %v after the POST", time.Since(posted))
	if p.Version != "4" || p.Status != "firing" || p.ExternalURL != am.URL || p.Alerts[0].Labels["severity"] != "page" || p.Alerts[0].Fingerprint == "" {
		t.Errorf("webhook payload = %+v", p)
	}
}

func TestPrometheusSendsToAlertmanager(t *testing.T) {
	t.Parallel()
	hook, got := webhookReceiver(t)
	am := StartAlertmanager(t, alertmanagerConfig(hook))
	rules := filepath.Join(t.TempDir(), "alerts.yml")
	if err := os.WriteFile(rules, []byte("groups:\n  - name: test\n    rules:\n      - alert: TestenvAlways\n        expr: vector(1)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	StartPrometheus(t, PrometheusOptions{RuleFiles: []string{rules}, AlertmanagerURL: am.URL})
	waitWebhook(t, got, "TestenvAlways")
}

func TestPostgres(t *testing.T) {
	t.Parallel()
	start := time.Now()
	dsn1 := StartPostgres(t)
	t.Logf("postgres cluster + first database in %v", time.Since(start))
	start = time.Now()
	dsn2 := StartPostgres(t)
	t.Logf("second database in %v", time.Since(start))
	if dsn1 == dsn2 {
		t.Fatalf("two StartPostgres calls gave the same DSN %s", dsn1)
	}
	ctx := context.Background()
	dbs := map[string]bool{}
	for i, dsn := range []string{dsn1, dsn2} {
		if !strings.HasPrefix(dsn, "postgres://") || !strings.Contains(dsn, "@127.0.0.1:") || !strings.HasSuffix(dsn, "?sslmode=disable") {
			t.Errorf("DSN %q has not the promised shape", dsn)
		}
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatalf("connect %s: %v", dsn, err)
		}
		defer conn.Close(ctx)
		var one int
		var db string
		if err := conn.QueryRow(ctx, "select 1, current_database()").Scan(&one, &db); err != nil || one != 1 {
			t.Fatalf("select 1 on %s: %d, %v", dsn, one, err)
		}
		dbs[db] = true
		if i == 0 {
			if _, err := conn.Exec(ctx, "create table only_in_first (x int)"); err != nil {
				t.Fatal(err)
			}
		} else {
			var n int
			if err := conn.QueryRow(ctx, "select count(*) from pg_tables where tablename = 'only_in_first'").Scan(&n); err != nil || n != 0 {
				t.Errorf("second database sees the first one's table (n=%d, err=%v)", n, err)
			}
		}
	}
	if len(dbs) != 2 {
		t.Errorf("databases %v, want two different ones", dbs)
	}
}

func TestJaeger(t *testing.T) {
	t.Parallel()
	start := time.Now()
	j := StartJaeger(t)
	t.Logf("jaeger ready in %v", time.Since(start))

	ctx := context.Background()
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(j.OTLPHTTP), otlptracehttp.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	service := fmt.Sprintf("testenv-%d", time.Now().UnixNano())
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSyncer(exp),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", service))),
	)
	defer tp.Shutdown(ctx)
	_, span := tp.Tracer("testenv").Start(ctx, "testenv-op")
	span.SetAttributes(attribute.String("autocapture.test", "yes"))
	traceID := span.SpanContext().TraceID().String()
	sent := time.Now()
	span.End()

	var found []JaegerTrace
	eventually(t, 10*time.Second, "span queryable in jaeger", func() bool {
		found = j.FindTraces(t, service)
		return len(found) > 0
	})
	t.Logf("span queryable %v after sending", time.Since(sent))
	if found[0].TraceID != traceID || len(found[0].Spans) != 1 || found[0].Spans[0].OperationName != "testenv-op" {
		t.Errorf("traces = %+v, want trace %s with span testenv-op", found, traceID)
	}
}
