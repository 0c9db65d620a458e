package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/deploy"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/playbooks/sglang"
	"github.com/autocapture/autocapture/playbooks/vllm"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vllmsim"
	"github.com/autocapture/autocapture/vocab"
	"github.com/prometheus/common/model"
)

// token is the webhook bearer token the stack's Alertmanager sends.
const token = "e2e-webhook-token"

// Shortened rule windows: the shipped rules with only these two changed.
const (
	ruleWindow = 30 * time.Second
	ruleHold   = 10 * time.Second
)

// legacySuffix on a stackOptions scenario runs that sim with the pre-2026
// metric names (--legacy-metrics): "overload" + legacySuffix.
const legacySuffix = "@legacy"

// sglangSuffix on a stackOptions scenario runs that sim as an SGLang server
// of the 2026 era (--engine=sglang): "overload" + sglangSuffix; followed by
// "-" and an era (sglangEraSuffix), as that era: "overload@sglang-0.4".
const sglangSuffix = "@sglang"

// sglangEraSuffix is the scenario suffix of an SGLang sim of era.
func sglangEraSuffix(era string) string { return sglangSuffix + "-" + era }

// simVariant splits a stackOptions scenario into the cause its sim injects
// and the vllmsim flags of its engine and metric generation.
func simVariant(sc string) (cause string, args []string) {
	if cause, ok := strings.CutSuffix(sc, legacySuffix); ok {
		return cause, []string{"--legacy-metrics"}
	}
	if cause, era, ok := strings.Cut(sc, sglangSuffix); ok {
		args = []string{"--engine=" + vllmsim.EngineSGLang}
		if era, ok := strings.CutPrefix(era, "-"); ok {
			args = append(args, "--sglang-era="+era)
		}
		return cause, args
	}
	return sc, nil
}

// sim is one vllmsim process serving one injected cause.
type sim struct {
	Scenario string // as given in stackOptions.Scenarios (the key of stack.Sims)
	Addr     string // host:port, the alerts' instance label
	Proc     *testenv.Process
}

// stack is every component of one end-to-end proof.
type stack struct {
	Jaeger *testenv.Jaeger
	Prom   *testenv.Prometheus
	AM     *testenv.Alertmanager
	Daemon *testenv.Process
	API    string // the daemon's base URL
	Sims   map[string]*sim
	// Fleets are the vllmsim fleet processes (fleet_test.go), by name.
	Fleets map[string]*fleet
	Dir    string
}

type stackOptions struct {
	Scenarios []string
	// DaemonConfig is extra YAML appended to the daemon's config.
	DaemonConfig string
	// PrometheusURL overrides the URL the daemon queries (to simulate an outage).
	PrometheusURL string
	// TracesURL overrides the trace backend URL the daemon searches (to simulate
	// an outage); empty means the stack's Jaeger.
	TracesURL string
	// Allow overrides the daemon's targets allow-list; empty means 127.0.0.0/8.
	Allow []string
	// S3 puts the artifacts in this bucket (the s3 backend, under s3Prefix);
	// nil keeps the local backend.
	S3 *testenv.S3Server
	// SimHost gives a scenario's sim its own loopback address (Linux routes
	// all of 127/8 to lo), so a port on its host is its alone; unset: 127.0.0.1.
	SimHost map[string]string
	// SimArgs are extra vllmsim flags per scenario, after the stack's own (a
	// repeated flag wins: --model=… renames the served model).
	SimArgs map[string][]string
	// ShiftAfter, when > 0, starts every sim healthy and shifts it to its
	// scenario after this long (vllmsim --shift-after), so Prometheus holds a
	// healthy past of each instance before its incident begins.
	ShiftAfter time.Duration
	// FireAtOnset sets every rule's `for:` to 0s: an alert fires at the first
	// evaluation its condition holds (default: ruleHold).
	FireAtOnset bool
	// ShortPlaybooks loads copies of the shipped playbooks shortened as the
	// rules are (shortPlaybooks): every PromQL range scaled by
	// ruleWindow/deploy.DefaultWindow and the baseline window set to
	// Baseline. Off: the embedded set, unchanged.
	ShortPlaybooks bool
	Baseline       string
	// Fleets start one vllmsim process each serving N instances of one
	// model (--fleet-listen), with its DCGM surface when asked (fleet_test.go).
	Fleets []fleetSpec
}

// s3Prefix is the key prefix of a stack's S3 artifacts.
const s3Prefix = "e2e"

// startStack starts Jaeger, one vllmsim per scenario, Prometheus with the shipped
// rules of both engines (windows shortened through deploy.AlertRules and
// deploy.SGLangAlertRules, nothing else changed), Alertmanager routing every
// alert to the daemon, and the daemon itself. The daemon's traces.service is
// the vLLM sims' service.name; the SGLang playbooks' traces steps search
// service "sglang" (capture/traces, engine: sglang), so one Jaeger serves both.
func startStack(t testing.TB, o stackOptions) *stack {
	t.Helper()
	s := &stack{Sims: map[string]*sim{}, Fleets: map[string]*fleet{}, Dir: t.TempDir()}
	s.Jaeger = testenv.StartJaeger(t)

	simBin := testenv.BuildBinary(t, "./cmd/vllmsim")
	var targets []string
	for i, sc := range o.Scenarios {
		host := "127.0.0.1"
		if h := o.SimHost[sc]; h != "" {
			host = h
		}
		addr := net.JoinHostPort(host, strconv.Itoa(testenv.FreePort(t)))
		cause, variant := simVariant(sc)
		args := []string{"--web.listen-address=" + addr, "--scenario=" + cause,
			fmt.Sprintf("--seed=%d", 100+i), "--otlp-endpoint=http://" + s.Jaeger.OTLPHTTP,
			"--otlp-protocol=http/protobuf", "--model=e2e-" + strings.ReplaceAll(sc, "@", "-")}
		if !strings.Contains(sc, sglangSuffix) { // SGLang hard-codes service.name "sglang"
			args = append(args, "--service-name=vllm-server")
		}
		args = append(args, variant...)
		if o.ShiftAfter > 0 && cause != vllmsim.ScenarioHealthy {
			args = append(args, "--shift-after="+o.ShiftAfter.String())
		}
		args = append(args, o.SimArgs[sc]...)
		cmd := exec.Command(simBin, args...)
		cmd.Env = append(os.Environ(), "OTEL_RESOURCE_ATTRIBUTES=service.instance.id="+addr)
		p := testenv.StartProcess(t, "vllmsim-"+sc, cmd)
		s.Sims[sc] = &sim{Scenario: sc, Addr: addr, Proc: p}
		targets = append(targets, addr)
	}
	// Every sim starts before the first is waited for: their start-ups overlap.
	for _, sm := range s.Sims {
		sm.Proc.WaitHTTP(t, "http://"+sm.Addr+"/health", 15*time.Second)
	}

	fleetTargets, dcgmTargets := s.startFleets(t, simBin, o.Fleets)
	targets = append(targets, fleetTargets...)

	daemonPort := testenv.FreePort(t)
	s.API = fmt.Sprintf("http://127.0.0.1:%d", daemonPort)
	s.AM = testenv.StartAlertmanager(t, alertmanagerConfig(s.API))

	var ruleFiles []string
	for name, shipped := range map[string]func(window, hold time.Duration) ([]byte, error){
		"vllm-alerts.yml": deploy.AlertRules, "sglang-alerts.yml": deploy.SGLangAlertRules,
	} {
		rules, err := shipped(ruleWindow, ruleHold)
		if err != nil {
			t.Fatal(err)
		}
		if o.FireAtOnset {
			rules = regexp.MustCompile(`(?m)^(\s+for: )\S+$`).ReplaceAll(rules, []byte("${1}0s"))
		}
		rulesPath := filepath.Join(s.Dir, name)
		if err := os.WriteFile(rulesPath, rules, 0o644); err != nil {
			t.Fatal(err)
		}
		ruleFiles = append(ruleFiles, rulesPath)
	}
	sort.Strings(ruleFiles)
	s.Prom = testenv.StartPrometheus(t, testenv.PrometheusOptions{
		ScrapeTargets: targets, RuleFiles: ruleFiles, AlertmanagerURL: s.AM.URL,
		ExtraScrapeConfigs: dcgmScrapeConfig(dcgmTargets),
	})

	promURL := s.Prom.URL
	if o.PrometheusURL != "" {
		promURL = o.PrometheusURL
	}
	tracesURL := s.Jaeger.QueryURL
	if o.TracesURL != "" {
		tracesURL = o.TracesURL
	}
	allow := "[127.0.0.0/8]"
	if len(o.Allow) > 0 {
		allow = "[" + strings.Join(o.Allow, ", ") + "]"
	}
	storageCfg := ""
	if o.S3 != nil {
		secret := filepath.Join(s.Dir, "s3-secret")
		if err := os.WriteFile(secret, []byte(o.S3.SecretAccessKey), 0o600); err != nil {
			t.Fatal(err)
		}
		storageCfg = fmt.Sprintf("  backend: s3\n  s3:\n    bucket: %s\n    prefix: %s\n    endpoint: %s\n"+
			"    path_style: true\n    region: %s\n    access_key_id: %s\n    secret_access_key_file: %s\n",
			o.S3.Bucket, s3Prefix, o.S3.Endpoint, o.S3.Region, o.S3.AccessKeyID, secret)
	}
	cfg := fmt.Sprintf(`web:
  listen_address: 127.0.0.1:%d
  auth:
    bearer_token: %s
storage:
  path: %s
%sprometheus:
  url: %s
  timeout: 5s
traces:
  backend: jaeger
  url: %s
  service: vllm-server
targets:
  allow: %s
%s%s`, daemonPort, token, filepath.Join(s.Dir, "data"), storageCfg, promURL, tracesURL, allow,
		shortPlaybooks(t, s.Dir, o), o.DaemonConfig)
	s.launch(t, cfg)
	return s
}

// shortPlaybooks copies the shipped playbooks of both engines (playbooks/vllm,
// playbooks/sglang) into dir/playbooks/<engine> shortened as the rules are,
// and returns the config line that loads them over the embedded set, which
// they replace by name ("" without o.ShortPlaybooks). Every range of their
// PromQL ([5m], [2m], [1m:]) is scaled by ruleWindow/deploy.DefaultWindow, at
// least minPlaybookRange, so a snapshot spans the same share of the rule's
// window as it does shipped (a 2m snapshot of a 30s rule would read mostly
// the calm before an onset the rule already sees); the baseline window
// becomes o.Baseline (a YAML flow map), since the shipped 30m ending 5m before
// startsAt lies before a test stack existed.
// minPlaybookRange is the shortest range shortPlaybooks makes: a mean over a
// window must hold a few requests (the shipped 1m holds 30 at 0.5 req/s, 6 s
// would hold 3, and one long prompt among them read as "prompts 2.5× longer").
const minPlaybookRange = 15 * time.Second

func shortPlaybooks(t testing.TB, dir string, o stackOptions) string {
	t.Helper()
	if !o.ShortPlaybooks {
		return ""
	}
	var globs []string
	for _, set := range []struct {
		engine string
		fsys   fs.FS
	}{{vllmsim.EngineVLLM, vllm.FS}, {vllmsim.EngineSGLang, sglang.FS}} {
		out := filepath.Join(dir, "playbooks", set.engine)
		shortenPlaybooks(t, set.fsys, out, o.Baseline)
		globs = append(globs, filepath.Join(out, "*.yaml"))
	}
	return fmt.Sprintf("playbooks: [%s]\n", strings.Join(globs, ", "))
}

// shortenPlaybooks writes fsys's playbook files into out, shortened as
// shortPlaybooks says.
func shortenPlaybooks(t testing.TB, fsys fs.FS, out, baseline string) {
	t.Helper()
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	scale := float64(ruleWindow) / float64(deploy.DefaultWindow)
	rangeRE := regexp.MustCompile(`\[([0-9]+[smh])(:?)\]`)
	baselineRE := regexp.MustCompile(`(?m)^(\s+baseline: )\{[^}]*\}`)
	files, err := fs.Glob(fsys, "*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ranges, baselines := 0, 0
	for _, f := range files {
		b, err := fs.ReadFile(fsys, f)
		if err != nil {
			t.Fatal(err)
		}
		b = rangeRE.ReplaceAllFunc(b, func(m []byte) []byte {
			sub := rangeRE.FindSubmatch(m)
			d, err := time.ParseDuration(string(sub[1]))
			if err != nil {
				t.Fatalf("%s: range %s: %v", f, m, err)
			}
			ranges++
			short := max(time.Duration(float64(d)*scale), minPlaybookRange)
			return fmt.Appendf(nil, "[%s%s]", model.Duration(short).String(), sub[2])
		})
		if baseline != "" {
			baselines += len(baselineRE.FindAll(b, -1))
			b = baselineRE.ReplaceAll(b, []byte("${1}"+baseline))
		}
		if err := os.WriteFile(filepath.Join(out, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if ranges == 0 || (baseline != "" && baselines == 0) {
		t.Fatalf("shipped playbooks for %s: %d ranges, %d baselines to shorten", out, ranges, baselines)
	}
}

// launch writes the daemon's config and runs the autocapture binary on it
// until it is ready.
func (s *stack) launch(t testing.TB, cfg string) {
	t.Helper()
	cfgPath := filepath.Join(s.Dir, "autocapture.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := testenv.BuildBinary(t, "./cmd/autocapture")
	s.Daemon = testenv.StartProcess(t, "autocapture", exec.Command(bin, "serve", "--config.file="+cfgPath))
	s.Daemon.WaitHTTP(t, s.API+"/-/ready", 30*time.Second)
}

func alertmanagerConfig(api string) string {
	return fmt.Sprintf(`route:
  receiver: autocapture
  group_by: [alertname, instance]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: autocapture
    webhook_configs:
      - url: %s/hooks/alertmanager
        send_resolved: true
        http_config:
          authorization:
            credentials: %s
`, api, token)
}

// runs lists every run of the daemon (newest first), following cursors.
func (s *stack) runs(t testing.TB) []runs.Run {
	t.Helper()
	var all []runs.Run
	cursor := ""
	for {
		q := url.Values{"limit": {"200"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page runs.Page
		s.getJSON(t, "/api/v1/runs?"+q.Encode(), &page)
		all = append(all, page.Runs...)
		if page.Next == "" {
			return all
		}
		cursor = page.Next
	}
}

// run fetches one run with its steps.
func (s *stack) run(t testing.TB, id string) *runs.Run {
	t.Helper()
	var r runs.Run
	s.getJSON(t, "/api/v1/runs/"+id, &r)
	return &r
}

func (s *stack) getJSON(t testing.TB, path string, v any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.API+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v\ndaemon logs:\n%s", path, err, tail(s.Daemon.Logs(), 3000))
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// requests returns a sim's finished requests from /admin/requests.
func (sm *sim) requests(t testing.TB) []vllmsim.FinishedRequest {
	t.Helper()
	resp, err := http.Get("http://" + sm.Addr + "/admin/requests")
	if err != nil {
		t.Fatalf("sim %s: %v", sm.Scenario, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out []vllmsim.FinishedRequest // the sim answers a bare array
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("sim %s: /admin/requests: %v", sm.Scenario, err)
	}
	return out
}

func finished(status vocab.Status) bool {
	switch status {
	case vocab.StatusQueued, vocab.StatusRunning:
		return false
	}
	return true
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func stepByKind(r *runs.Run, kind string) *executor.StepRecord {
	for i := range r.Steps {
		if r.Steps[i].Kind == kind {
			return &r.Steps[i]
		}
	}
	return nil
}

func describe(r *runs.Run) string {
	var b strings.Builder
	fmt.Fprintf(&b, "run %s %s status=%s reason=%q", r.ID, r.Alertname, r.Status, r.Reason)
	if r.Verdict != nil {
		fmt.Fprintf(&b, " verdict=%s contributing=%v\n  evidence: %s", r.Verdict.ID, r.Verdict.Contributing, strings.Join(r.Verdict.Evidence, " | "))
	}
	for _, st := range r.Steps {
		fmt.Fprintf(&b, "\n  step %s (%s) %s %s %s", st.ID, st.Kind, st.Status, st.Reason, st.Error)
	}
	return b.String()
}
