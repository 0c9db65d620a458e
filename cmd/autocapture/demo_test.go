package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/vllmsim"
)

// demoBound bounds one demo run in these tests.
const demoBound = 60 * time.Second

var (
	demoOutcome   = regexp.MustCompile(`(?m)^══ (\S+) in \S+: status (\w+), verdict (\S+)$`)
	demoArtifacts = regexp.MustCompile(`(?m)^   artifacts: (.+)$`)
)

// demoResult is one finished `autocapture demo`.
type demoResult struct {
	code           int
	stdout, stderr string
	runID, status  string
	verdict        string
	artifacts      string // the folder it names
}

// runDemoBinary runs the real binary's demo with args, bounded by demoBound.
func runDemoBinary(t *testing.T, args ...string) demoResult {
	t.Helper()
	bin := testenv.BuildBinary(t, "./cmd/autocapture")
	ctx, cancel := context.WithTimeout(context.Background(), demoBound)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"demo"}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	r := demoResult{stdout: out.String(), stderr: errOut.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	default:
		t.Fatalf("demo %v: %v", args, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("demo %v did not end within %s\nstdout:\n%s\nstderr:\n%s", args, demoBound, r.stdout, r.stderr)
	}
	if m := demoOutcome.FindStringSubmatch(r.stdout); m != nil {
		r.runID, r.status, r.verdict = m[1], m[2], m[3]
	}
	if m := demoArtifacts.FindStringSubmatch(r.stdout); m != nil {
		r.artifacts = m[1]
	}
	return r
}

// TestDemoScenarios runs the demo on every scenario that pages, with no
// Prometheus: the printed verdict is the injected cause, the exit code 0,
// the steps that need Prometheus say so instead of failing, and the folder
// it names holds the run's artifacts (the profile's trace files for
// unexplained, which alone goes to tier 3).
func TestDemoScenarios(t *testing.T) {
	for _, engine := range []string{vllmsim.EngineVLLM, vllmsim.EngineSGLang} {
		for _, sc := range demoScenarios() {
			if engine == vllmsim.EngineSGLang && !sglangDemoScenarios[sc] {
				continue
			}
			t.Run(engine+"/"+sc, func(t *testing.T) {
				t.Parallel()
				checkDemoScenario(t, engine, sc)
			})
		}
	}
}

// sglangDemoScenarios are the SGLang demos TestDemoScenarios runs: the
// one that ends in tier 3 (SGLang's profiler, its rank files, the cost) and
// one that stops at triage. Every SGLang cause is proven through the shipped
// rules, a real Prometheus and Alertmanager in e2e
// (TestSGLangVerdictAtOnsetPerShiftedCause); the other four demos would add
// about a minute of CI for what those runs already show.
var sglangDemoScenarios = map[string]bool{vllmsim.ScenarioUnexplained: true, vllmsim.ScenarioKVPressure: true}

// checkDemoScenario runs the demo of one engine's simulated cause; see
// TestDemoScenarios. The SGLang demo runs the shipped SGLang rules'
// alert and playbooks, and its thread names the dialect it read.
func checkDemoScenario(t *testing.T, engine, sc string) {
	dir := t.TempDir()
	r := runDemoBinary(t, "--engine", engine, "--scenario", sc, "--storage.path", dir, "--warmup", "3s", "--timeout", "45s")
	if r.code != 0 || r.verdict != sc {
		t.Fatalf("exit %d, verdict %q, want 0 and %s\nstdout:\n%s\nstderr:\n%s", r.code, r.verdict, sc, r.stdout, r.stderr)
	}
	rule := demoRules[engine][sc]
	if !strings.Contains(r.stdout, "Firing "+rule.alertname+" ") || !strings.Contains(r.stdout, `job="`+engine+`"`) {
		t.Errorf("%s: the demo did not fire %s for a %s job:\n%s", engine, rule.alertname, engine, r.stdout)
	}
	if engine == vllmsim.EngineSGLang && !strings.Contains(r.stdout, "(SGLang 2026)") {
		t.Errorf("sglang: the scrape's reply does not name the dialect it read:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, "not configured: no Prometheus (set prometheus.url); tier 1 from the instance's own /metrics") ||
		regexp.MustCompile(`step snapshot \(prometheus, tier 1\) failed`).MatchString(r.stdout) {
		t.Errorf("the thread does not say plainly that no Prometheus runs:\n%s", r.stdout)
	}
	// One order: parent, step replies as they finish, then the
	// outcome once (the verdict's parent edits printed it first,
	// before the replies, and again at the end).
	ends := regexp.MustCompile(`(?m)^── run \S+ (succeeded|partial|failed)`).FindAllStringIndex(r.stdout, -1)
	lastStep := strings.LastIndex(r.stdout, " · step ")
	if len(ends) != 1 || lastStep < 0 || lastStep > ends[0][0] {
		t.Errorf("want every step reply, then one outcome block; %d outcome blocks, the last step reply at %d:\n%s", len(ends), lastStep, r.stdout)
	}
	if !strings.Contains(r.stdout, "stop answering when the demo exits") || !strings.Contains(r.stdout, "--keep") {
		t.Errorf("the demo exits without saying its links die with it and that --keep keeps them:\n%s", r.stdout)
	}
	if strings.Contains(r.stdout, "(bad-config)") {
		t.Errorf("the partial run's reason still lists the Prometheus steps as failures:\n%s", r.stdout)
	}
	files := checkDemoArtifacts(t, r, dir)
	traces := 0
	for _, f := range files {
		// vLLM's <name>.pt.trace.json.gz, SGLang's <id>-TP-<n>.trace.json.gz
		if strings.HasSuffix(f, ".trace.json.gz") {
			traces++
		}
	}
	if sc == vllmsim.ScenarioUnexplained {
		if engine == vllmsim.EngineVLLM {
			checkReadmeDemo(t, r.stdout) // the README shows this run
		}
		if traces == 0 || !contains(files, "/profile/profile-report.json") {
			t.Errorf("unexplained: no trace files or profile report among the artifacts: %v", files)
		}
		if !strings.Contains(r.stdout, "GEMM") {
			t.Errorf("unexplained: the profile's report does not name the GEMM regression:\n%s", r.stdout)
		}
		if !strings.Contains(r.stdout, " · cost: ") {
			t.Errorf("unexplained: the profile's summary does not say what the capture cost serving:\n%s", r.stdout)
		}
		checkProfiledVerdict(t, r)
		// SGLang's profiler names each rank's file <prefix>-<time>-TP-<r> (SGLANG.md §5).
		if rankFile := regexp.MustCompile(`-TP-[0-9]+\.trace\.json\.gz$`); engine == vllmsim.EngineSGLang &&
			!slices.ContainsFunc(files, rankFile.MatchString) {
			t.Errorf("sglang: no SGLang rank trace file among the artifacts: %v", files)
		}
	} else if traces != 0 {
		t.Errorf("%s: a profile was taken though triage explained the alert: %v", sc, files)
	}
}

// checkDemoArtifacts checks the folder the demo names: under its --storage.path, the
// run's own, holding the manifest (naming the run) and both scrapes; it
// returns the files, slash-separated and relative to the folder.
func checkDemoArtifacts(t *testing.T, r demoResult, dir string) []string {
	t.Helper()
	if r.artifacts == "" || !strings.HasPrefix(r.artifacts, dir) || filepath.Base(r.artifacts) != r.runID {
		t.Fatalf("artifact folder %q: want the run %s's folder under %s\n%s", r.artifacts, r.runID, dir, r.stdout)
	}
	var files []string
	err := filepath.WalkDir(r.artifacts, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(r.artifacts, p)
			files = append(files, "/"+filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"/manifest.json", "/scrape/scrape-1.txt", "/scrape/scrape-2.txt"} {
		if !contains(files, want) {
			t.Errorf("no %s among the artifacts: %v", want, files)
		}
	}
	b, err := os.ReadFile(filepath.Join(r.artifacts, "manifest.json"))
	var m map[string]any
	if err != nil || json.Unmarshal(b, &m) != nil || !bytes.Contains(b, []byte(r.runID)) {
		t.Errorf("manifest.json is not the run's JSON manifest (%v): %.300s", err, b)
	}
	return files
}

// contains says whether some file ends with suffix.
func contains(files []string, suffix string) bool {
	for _, f := range files {
		if strings.HasSuffix(f, suffix) {
			return true
		}
	}
	return false
}

// TestDemoWithPrometheus gives the demo a real Prometheus scraping the
// simulator: the full tier 1 runs (snapshot and charts succeed, nothing
// says Prometheus is missing) and the verdict is still the cause. Not
// parallel: the address it picks must stay free until the demo listens.
func TestDemoWithPrometheus(t *testing.T) {
	t.Parallel()
	simAddr := demoSimAddress(t)
	prom := testenv.StartPrometheus(t, testenv.PrometheusOptions{ScrapeTargets: []string{simAddr}})
	r := runDemoBinary(t, "--scenario", vllmsim.ScenarioOverload, "--storage.path", t.TempDir(), "--vllm.listen-address", simAddr,
		"--prometheus.url", prom.URL, "--warmup", "12s", "--timeout", "40s")
	if r.code != 0 || r.verdict != vllmsim.ScenarioOverload {
		t.Fatalf("exit %d, verdict %q\nstdout:\n%s\nstderr:\n%s", r.code, r.verdict, r.stdout, r.stderr)
	}
	for _, step := range []string{"snapshot (prometheus, tier 1)", "chart_queue (chart, tier 1)"} {
		if !strings.Contains(r.stdout, "step "+step+" succeeded") {
			t.Errorf("step %s did not succeed with Prometheus:\n%s", step, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "no Prometheus") {
		t.Errorf("the demo says no Prometheus runs though one does:\n%s", r.stdout)
	}
	if r.status != "succeeded" {
		t.Errorf("status %s with the full tier 1, want succeeded", r.status)
	}
}

// demoSimAddress is a free host:port on a 127.0.0.x (x from a random start)
// whose port 9101 is free too, for the simulator and its agent.
func demoSimAddress(t *testing.T) string {
	t.Helper()
	start := rand.IntN(240)
	for i := range 240 {
		host := fmt.Sprintf("127.0.0.%d", 2+(start+i)%240)
		agent, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(demoAgentPort)))
		if err != nil {
			continue
		}
		sim, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		agent.Close()
		if err != nil {
			continue
		}
		addr := sim.Addr().String()
		sim.Close()
		return addr
	}
	t.Fatalf("no 127.0.0.x with port %d free", demoAgentPort)
	return ""
}

// TestDemoKeep: with --keep the demo goes on serving the API after the run,
// at the URLs it prints, until SIGTERM, and then exits 0.
func TestDemoKeep(t *testing.T) {
	t.Parallel()
	bin := testenv.BuildBinary(t, "./cmd/autocapture")
	cmd := exec.Command(bin, "demo", "--scenario", vllmsim.ScenarioOverload, "--storage.path", t.TempDir(), "--warmup", "2s", "--keep")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	serving := regexp.MustCompile(`^Serving the API at (\S+) \(runs: \S+, page: (\S+)\)`)
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		done <- cmd.Wait()
	}()
	var base, page string
	deadline := time.After(demoBound)
	for base == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the demo ended without serving; stderr:\n%s", stderr.String())
			}
			if m := serving.FindStringSubmatch(l); m != nil {
				base, page = m[1], m[2]
			}
		case <-deadline:
			t.Fatal("no \"Serving the API\" line within the bound")
		}
	}
	go func() { //nolint:revive // drain what follows
		for range lines {
		}
	}()
	id := page[strings.LastIndex(page, "/")+1:]
	resp, err := http.Get(base + "/api/v1/runs/" + id)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"verdict"`)) {
		t.Fatalf("GET the run after the demo: %s %.300s", resp.Status, body)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("after SIGTERM: %v; stderr:\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the demo did not stop within 30 s of SIGTERM")
	}
}

// TestDemoRefuses: bad input is a usage error (2) naming what is wrong; a
// run that cannot finish in time is exit 1 with the reason.
func TestDemoRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"healthy trips no alert", []string{"--scenario", "healthy"}, 2, "healthy trips no alert"},
		{"unknown scenario", []string{"--scenario", "nope"}, 2, `--scenario "nope"`},
		{"stray argument", []string{"extra"}, 2, "unexpected arguments"},
		{"not on loopback", []string{"--vllm.listen-address", "0.0.0.0:0"}, 1, "loopback only"},
		{"run past the timeout", []string{"--scenario", "overload", "--warmup", "0s", "--timeout", "500ms"}, 1, "did not finish within --timeout 500ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runDemoBinary(t, append(tc.args, "--storage.path", t.TempDir())...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.says) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", r.code, r.stderr, tc.code, tc.says)
			}
		})
	}
}
