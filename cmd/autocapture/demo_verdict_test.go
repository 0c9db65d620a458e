package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/notify/slack"
	"github.com/autocapture/autocapture/vocab"
)

// profiledLine is a verdict line that states the profile's finding.
var profiledLine = regexp.MustCompile(`unexplained by the metrics — profile: GEMM \d+% of GPU time; no healthy baseline to compare \(set one with ` + "`baseline: true`")

// checkProfiledVerdict: once the demo's profile read the GEMM regression,
// the verdict says so on every surface: the console's outcome block, the
// verdict the API serves (the demo's report line), the run's JSON (its
// manifest), and the Slack parent rendered from it; its advice no longer
// asks for a profile.
func checkProfiledVerdict(t *testing.T, r demoResult) {
	t.Helper()
	outcome := regexp.MustCompile(`(?m)^   verdict: (.+)$`).FindStringSubmatch(r.stdout)
	if outcome == nil || !profiledLine.MatchString(outcome[1]) {
		t.Errorf("console: the outcome's verdict line does not state the profile's finding: %q\n%s", outcome, r.stdout)
	}
	api := regexp.MustCompile(`(?m)^   verdict:   (.+)$`).FindStringSubmatch(r.stdout)
	if api == nil || !profiledLine.MatchString(api[1]) {
		t.Errorf("API: the run's verdict does not state the profile's finding: %q", api)
	}
	b, err := os.ReadFile(filepath.Join(r.artifacts, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Verdict *vocab.Verdict `json:"verdict"`
	}
	if err := json.Unmarshal(b, &m); err != nil || m.Verdict == nil || m.Verdict.Profile == nil {
		t.Fatalf("the run's JSON has no profile finding in its verdict (%v): %.400s", err, b)
	}
	pf := m.Verdict.Profile
	if m.Verdict.ID != vocab.VerdictUnexplained || pf.Family != "gemm" || pf.Share < 0.5 || pf.HasBaseline || pf.TopKernel == "" ||
		pf.Step != "profile" || !strings.HasSuffix(pf.Report, "/profile-report.json") {
		t.Errorf("the run's verdict %s with finding %+v: want unexplained, GEMM leading, no baseline, the top kernel and the report", m.Verdict.ID, pf)
	}
	for _, a := range m.Verdict.Advice {
		if strings.Contains(a, "profile (tier 3)") {
			t.Errorf("advice after the profile still asks for one: %q", a)
		}
	}
	parent := slack.RenderParent(slack.Parent{RunID: r.runID, Alert: "VLLMHighITL"}.Apply(notify.Summary{RunID: r.runID,
		Key: notify.KeyCloseVerdictProfiled + "/vllm-high-itl/profile", Verdict: m.Verdict}))
	if !profiledLine.MatchString(parent.Text) {
		t.Errorf("Slack: the parent does not state the profile's finding: %q", parent.Text)
	}
}
