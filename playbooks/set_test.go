package playbooks

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/vocab"
)

var testWindow = vocab.Window{
	Start: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
	End:   time.Date(2026, 1, 1, 0, 15, 0, 0, time.UTC),
}

func loadGood(t *testing.T) *Set {
	t.Helper()
	s, err := Load(Sources{Globs: []string{"testdata/good.yaml"}}, zap.NewNop())
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	return s
}

func alert(labels ...string) template.Alert {
	kv := template.KV{}
	for i := 0; i+1 < len(labels); i += 2 {
		kv[labels[i]] = labels[i+1]
	}
	return template.Alert{Status: "firing", Labels: kv, StartsAt: testWindow.Start}
}

func names(plans []*Plan) string {
	var s []string
	for _, p := range plans {
		s = append(s, p.Playbook)
	}
	return strings.Join(s, ",")
}

func TestMatchFirstAndContinue(t *testing.T) {
	s := loadGood(t)
	for _, tc := range []struct {
		name   string
		labels []string
		want   string
	}{
		{"continue lets the next match run, which stops there", []string{"alertname", "VLLMHighTTFT", "severity", "page", "instance", "a:1", "model_name", "m"}, "vllm-high-ttft,any-vllm"},
		{"regex matcher must match the whole value", []string{"alertname", "VLLMHighTTFT", "severity", "pager", "model_name", "m"}, "any-vllm"},
		{"first match without continue stops", []string{"alertname", "VLLMQueueDeep", "model_name", "m"}, "any-vllm"},
		{"no match is an empty list", []string{"alertname", "NodeDown"}, ""},
		{"a missing label reads as empty", []string{"severity", "page"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plans, err := s.Plan(alert(tc.labels...), testWindow)
			if err != nil {
				t.Fatal(err)
			}
			if plans == nil {
				t.Fatal("Plan returned nil, want an empty slice")
			}
			if got := names(plans); got != tc.want {
				t.Errorf("matched %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPlanRendersConfigAndLimits(t *testing.T) {
	s := loadGood(t)
	plans, _ := s.Plan(alert("alertname", "VLLMHighTTFT", "severity", "page", "instance", `h"x:1`, "model_name", "m"), testWindow)
	if len(plans) != 2 {
		t.Fatalf("got %d plans, want 2", len(plans))
	}
	p := plans[0]
	if p.Timeout != 2*time.Minute || p.Cooldown != 10*time.Minute || p.MaxConcurrent != 2 {
		t.Errorf("limits = %s %s %d", p.Timeout, p.Cooldown, p.MaxConcurrent)
	}
	if want := `vllm-high-ttft{instance="h\"x:1"}`; p.CooldownKey != want {
		t.Errorf("cooldown key %q, want %q", p.CooldownKey, want)
	}
	if p.File != "testdata/good.yaml" || p.Line != 2 || len(p.Digest) != 64 {
		t.Errorf("identity = %s:%d %q", p.File, p.Line, p.Digest)
	}
	snap := p.Steps[0]
	if snap.RenderErr != nil || snap.Step == nil {
		t.Fatalf("snapshot: %v", snap.RenderErr)
	}
	q := snap.Config.(*tPromConfig).Queries[0]
	if want := `max(vllm:num_requests_waiting{instance="h\"x:1"}[15m])`; q.Query != want {
		t.Errorf("query %q, want %q", q.Query, want)
	}
	if q.Signal != "queue_depth" || snap.Timeout != 20*time.Second || snap.Tier != vocab.TierMetrics {
		t.Errorf("snapshot step = %+v", snap)
	}
	slow := p.Steps[2]
	if slow.Tier != vocab.TierTraces || !slow.ContinueOnError || slow.When == nil || slow.Cooldown != 30*time.Minute {
		t.Errorf("slow step = %+v", slow)
	}
	if want := `vllm-high-ttft/slow{instance="h\"x:1"}`; slow.CooldownKey != want {
		t.Errorf("step cooldown key %q, want %q", slow.CooldownKey, want)
	}
	if got := slow.Config.(*tTracesConfig).Limit; got != 5 {
		t.Errorf("limit %d, want 5", got)
	}
}

func TestPlanMissingLabelIsRenderErr(t *testing.T) {
	s := loadGood(t)
	// No instance label: the vars built on it fail, so the step that uses them
	// does, naming the var; steps that use none still build (triage answers).
	// The second playbook reads model_name, which is also absent.
	plans, err := s.Plan(alert("alertname", "VLLMHighTTFT", "severity", "page"), testWindow)
	if err != nil || len(plans) != 2 {
		t.Fatalf("plans %d, err %v", len(plans), err)
	}
	failing := map[string]string{
		"vllm-high-ttft/snapshot": `vars.inst: `,
		"any-vllm/model":          `map has no entry for key "model_name"`,
	}
	for _, p := range plans {
		for _, st := range p.Steps {
			want, fails := failing[p.Playbook+"/"+st.ID]
			switch {
			case !fails && (st.RenderErr != nil || st.Step == nil):
				t.Errorf("%s/%s uses no failed var but did not build: %v", p.Playbook, st.ID, st.RenderErr)
			case fails && (st.RenderErr == nil || st.Step != nil):
				t.Errorf("%s/%s: RenderErr nil or step built", p.Playbook, st.ID)
			case fails && vocab.Classify(st.RenderErr) != vocab.ReasonBadConfig:
				t.Errorf("%s/%s: reason %s", p.Playbook, st.ID, vocab.Classify(st.RenderErr))
			case fails && (!strings.Contains(st.RenderErr.Error(), want) || strings.Contains(st.RenderErr.Error(), "\n")):
				t.Errorf("%s/%s: %q, want one line with %q", p.Playbook, st.ID, st.RenderErr, want)
			}
		}
	}
}

func TestWhenEvaluation(t *testing.T) {
	s := loadGood(t)
	cond := s.Playbooks[0].Steps[2].When
	for _, tc := range []struct {
		name     string
		severity string
		prior    map[string]*vocab.Result
		want     bool
	}{
		{"unexplained verdict", "ticket", map[string]*vocab.Result{"triage": {Verdict: &vocab.Verdict{ID: "unexplained"}}}, true},
		{"explained verdict, not a page", "ticket", map[string]*vocab.Result{"triage": {Verdict: &vocab.Verdict{ID: "overload"}}}, false},
		{"triage did not run, not a page", "ticket", map[string]*vocab.Result{}, false},
		{"triage did not run, a page", "page", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := cond.Eval(alert("severity", tc.severity), tc.prior)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRebuildFromStoredSource(t *testing.T) {
	s := loadGood(t)
	a := alert("alertname", "VLLMHighTTFT", "severity", "page", "instance", "a:1", "model_name", "m")
	for _, pb := range s.Playbooks {
		p := pb.Plan(a, testWindow)
		re, err := s.Rebuild(p.Stored(), a, testWindow)
		if err != nil {
			t.Fatalf("%s: %v", pb.Name, err)
		}
		if re.Digest != p.Digest || len(re.Steps) != len(p.Steps) {
			t.Errorf("%s: rebuilt digest %s steps %d, want %s %d", pb.Name, re.Digest, len(re.Steps), p.Digest, len(p.Steps))
		}
	}
	sp := s.Playbooks[0].Plan(a, testWindow).Stored()
	sp.Source = []byte(strings.Replace(string(sp.Source), "limit: 5", "limit: 6", 1))
	if _, err := Rebuild(sp, a, testWindow); err == nil || !strings.Contains(err.Error(), "digest") {
		t.Errorf("edited source: err %v, want a digest mismatch", err)
	}
}

func TestEmbeddedSetLoads(t *testing.T) {
	s, err := Load(Shipped, zap.NewNop())
	if err != nil {
		t.Fatalf("embedded set: %v", err)
	}
	for _, f := range s.Files {
		if !IsShipped(f) {
			t.Errorf("embedded file named %q", f)
		}
	}
}

// BenchmarkPlan measures matching, rendering and building for one alert (two plans).
func BenchmarkPlan(b *testing.B) {
	s, err := Load(Sources{Globs: []string{"testdata/good.yaml"}}, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	a := alert("alertname", "VLLMHighTTFT", "severity", "page", "instance", "a:1", "model_name", "m")
	for b.Loop() {
		if _, err := s.Plan(a, testWindow); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoad measures parsing and validating one file.
func BenchmarkLoad(b *testing.B) {
	for b.Loop() {
		if _, err := LoadFiles([]string{"testdata/good.yaml"}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestFilesLayeredOverTheShippedSet: a config's playbook files come before
// the shipped set, which stays: an alert only the shipped set knows runs a
// shipped playbook; one the file matches runs the file's; a file's playbook
// named as a shipped one replaces it (its shipped twin is gone, not a
// duplicate), and so does a preset; a file may use a shipped preset; the
// shipped files' tests are left out; with the shipped set off, the file alone.
func TestFilesLayeredOverTheShippedSet(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("mine.yaml", `playbooks:
  - name: team-queue
    match: ['alertname="VLLMQueueDeep"', 'team="search"']
    steps:
      - use: vllm-triage
  - name: vllm-high-itl
    match: ['alertname="VLLMHighITL"']
    steps:
      - id: v
        http: {path: /version}
presets:
  - name: vllm-profile
    steps:
      - id: profile
        http: {path: /version}
`)
	s, err := Load(Sources{Globs: []string{filepath.Join(dir, "*.yaml")}, Shipped: true}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	for _, pb := range s.Playbooks {
		if prev, dup := names[pb.Name]; dup {
			t.Fatalf("%s twice (%s, %s)", pb.Name, prev, pb.File)
		}
		names[pb.Name] = pb.File
	}
	if s.Playbooks[0].Name != "team-queue" || !strings.HasSuffix(names["vllm-high-itl"], "mine.yaml") ||
		!strings.HasPrefix(names["vllm-queue-deep"], EmbeddedPrefix) {
		t.Errorf("playbooks %v: want the file's first, its vllm-high-itl for the shipped one, the shipped rest", names)
	}
	if strings.Join(s.Replaced, ",") != "preset vllm-profile,vllm-high-itl" {
		t.Errorf("replaced %v", s.Replaced)
	}
	for _, tc := range s.Tests {
		if IsShipped(tc.File) {
			t.Errorf("a shipped test case in a layered set: %s:%d", tc.File, tc.Line)
		}
	}
	route := func(labels ...string) string {
		got := Match(s.Playbooks, alert(labels...).Labels)
		if len(got) == 0 {
			return ""
		}
		return got[0].Name
	}
	if r := route("alertname", "VLLMQueueDeep", "team", "search"); r != "team-queue" {
		t.Errorf("the file's alert routed to %q", r)
	}
	if r := route("alertname", "VLLMQueueDeep", "team", "chat"); r != "vllm-queue-deep" {
		t.Errorf("an alert only the shipped set matches routed to %q", r)
	}

	alone, err := Load(Sources{Globs: []string{filepath.Join(dir, "*.yaml")}}, zap.NewNop())
	if err == nil || !strings.Contains(err.Error(), `vllm-triage`) {
		// Alone, the file's use of the shipped preset has nothing to name.
		t.Fatalf("the file alone: %v, want its use of vllm-triage refused", err)
	}
	_ = alone
	if _, err := Load(Sources{}, zap.NewNop()); err == nil || !strings.Contains(err.Error(), "none to load") {
		t.Errorf("nothing to load: %v", err)
	}
}

// TestShippedDuplicatesStayErrors: layering lets a file replace a shipped
// playbook or preset, never a shipped file another shipped file's: a name
// twice under the files is the error it always was.
func TestShippedDuplicatesStayErrors(t *testing.T) {
	pb := "playbooks:\n  - name: twice\n    match: ['alertname=\"X\"']\n    steps:\n      - id: v\n        http: {path: /version}\n"
	read := func(name string) ([]byte, error) { return []byte(pb), nil }
	_, err := build(nil, []string{EmbeddedPrefix + "a.yaml", EmbeddedPrefix + "b.yaml"}, read)
	if err == nil || !strings.Contains(err.Error(), `duplicate playbook name "twice"`) {
		t.Errorf("a name twice in the shipped set: %v, want the duplicate refused", err)
	}
	s, err := build([]string{"mine.yaml"}, []string{EmbeddedPrefix + "a.yaml"}, read)
	if err != nil || len(s.Playbooks) != 1 || s.Playbooks[0].File != "mine.yaml" || strings.Join(s.Replaced, ",") != "twice" {
		t.Errorf("a file over the shipped set: %v, %+v", err, s)
	}
}
