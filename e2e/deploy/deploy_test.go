package deploy

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/deploy"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/playbooks"
)

// TestMain runs the tests from deploy/, the folder of the manifests and
// rules they check: their paths (compose/compose.yaml, prometheus/tests/,
// kubernetes/, ".." for the repository) are written relative to it, as when
// these tests lived there.
func TestMain(m *testing.M) {
	if err := os.Chdir(filepath.Join("..", "..", "deploy")); err != nil {
		fmt.Fprintln(os.Stderr, "e2e/deploy:", err)
		os.Exit(1)
	}
	testenv.Main(m)
}

// parallel runs t beside the package's other tests: each reads the shipped
// files and owns the ports, folders and processes it starts. -update-chart
// rewrites the chart's files as others render them, so it runs them in turn.
func parallel(t *testing.T) {
	if !*updateChart {
		t.Parallel()
	}
}

// run executes a tool and fails the test with its output when it fails.
func run(t *testing.T, tool string, args ...string) string {
	t.Helper()
	out, err := exec.Command(testenv.Tool(t, tool), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", tool, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestPromtoolRuleUnitTests(t *testing.T) {
	parallel(t)
	tests, err := filepath.Glob("prometheus/tests/*.yml")
	if err != nil || len(tests) == 0 {
		t.Fatalf("no promtool tests found: %v", err)
	}
	out := run(t, "promtool", append([]string{"test", "rules"}, tests...)...)
	if strings.Count(out, "SUCCESS") != len(tests) {
		t.Errorf("promtool test rules:\n%s", out)
	}
}

func TestPromtoolCheckRules(t *testing.T) {
	parallel(t)
	for _, f := range []string{"prometheus/vllm-alerts.yml", "prometheus/sglang-alerts.yml"} {
		out := run(t, "promtool", "check", "rules", f)
		if !strings.Contains(out, "SUCCESS: 5 rules found") {
			t.Errorf("promtool check rules %s:\n%s", f, out)
		}
	}
}

func TestAmtoolCheckConfig(t *testing.T) {
	parallel(t)
	files, _ := filepath.Glob("alertmanager/*.yml")
	if len(files) == 0 {
		t.Fatal("no Alertmanager config in deploy/alertmanager")
	}
	for _, f := range files {
		out := run(t, "amtool", "check-config", f)
		if !strings.Contains(out, "SUCCESS") {
			t.Errorf("amtool check-config %s:\n%s", f, out)
		}
	}
}

func TestEmbeddedRulesAreTheFile(t *testing.T) {
	parallel(t)
	for f, embedded := range map[string][]byte{"prometheus/vllm-alerts.yml": deploy.VLLMAlertRules, "prometheus/sglang-alerts.yml": deploy.SGLangRules} {
		onDisk, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(onDisk, embedded) {
			t.Errorf("embedded rules differ from %s", f)
		}
	}
}

func TestAlertRulesShortened(t *testing.T) {
	parallel(t)
	for _, tc := range []struct {
		name         string
		window, hold time.Duration
		windows      []string
		fors         string
	}{
		{"shipped", 0, 0, []string{"[5m])"}, "for: 2m"},
		{"e2e", 30 * time.Second, 5 * time.Second, []string{"[30s])"}, "for: 5s"},
		{"window only", time.Minute, 0, []string{"[1m])"}, "for: 2m"},
	} {
		for engine, rules := range map[string]func(window, hold time.Duration) ([]byte, error){"vllm": deploy.AlertRules, "sglang": deploy.SGLangAlertRules} {
			t.Run(tc.name+"/"+engine, func(t *testing.T) {
				b, err := rules(tc.window, tc.hold)
				if err != nil {
					t.Fatal(err)
				}
				s := string(b)
				for _, w := range tc.windows {
					// TTFT, ITL (two generations) and abort ratio (two) use rate
					// windows, and so does the traffic floor of those three alerts
					// (SGLang's as vLLM's).
					if n := strings.Count(s, w); n != 8 {
						t.Errorf("%s occurs %d times, want 8", w, n)
					}
				}
				if n := strings.Count(s, "\n        "+tc.fors+"\n"); n != 5 {
					t.Errorf("%q occurs %d times, want 5", tc.fors, n)
				}
				path := filepath.Join(t.TempDir(), "rules.yml")
				if err := os.WriteFile(path, b, 0o644); err != nil {
					t.Fatal(err)
				}
				if out := run(t, "promtool", "check", "rules", path); !strings.Contains(out, "5 rules found") {
					t.Errorf("promtool check rules on the shortened rules:\n%s", out)
				}
			})
		}
	}
	if _, err := deploy.AlertRules(-time.Second, 0); err == nil {
		t.Error("a negative window is accepted")
	}
	if _, err := deploy.SGLangAlertRules(0, -time.Second); err == nil {
		t.Error("a negative hold is accepted")
	}
}

// TestEveryShippedAlertHasItsPlaybook: each alert of the shipped rules routes,
// in the shipped playbook set, to a playbook of its own engine (an
// SGLang alert to an SGLang playbook), so no shipped alert pages with nothing
// to run.
func TestEveryShippedAlertHasItsPlaybook(t *testing.T) {
	parallel(t)
	set, err := playbooks.Load(playbooks.Shipped, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	for prefix, rules := range map[string][]byte{playbooks.EmbeddedPrefix: deploy.VLLMAlertRules, playbooks.EmbeddedSGLangPrefix: deploy.SGLangRules} {
		var groups struct {
			Groups []struct {
				Rules []struct {
					Alert  string            `yaml:"alert"`
					Labels map[string]string `yaml:"labels"`
				} `yaml:"rules"`
			} `yaml:"groups"`
		}
		if err := yaml.Unmarshal(rules, &groups); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, g := range groups.Groups {
			for _, r := range g.Rules {
				n++
				got := playbooks.Match(set.Playbooks, map[string]string{"alertname": r.Alert, "severity": r.Labels["severity"], "instance": "10.0.0.7:8000", "model_name": "m"})
				if len(got) == 0 || !strings.HasPrefix(got[0].File, prefix) {
					t.Errorf("%s routes to %v, want a playbook of %s", r.Alert, got, prefix)
				}
			}
		}
		if n != 5 {
			t.Errorf("%s: %d rules, want 5", prefix, n)
		}
	}
}
