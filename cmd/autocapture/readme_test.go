package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/config"
)

// The README shows what `autocapture demo` prints, between these markers.
// TestDemoScenarios/vllm/unexplained holds that sample to the real run it just
// made (readmeSample below); -update-readme rewrites it from that run.
const (
	readmeFile        = "../../README.md"
	readmeDemoBegin   = "<!-- demo output: written by go test ./cmd/autocapture -run TestDemoScenarios/vllm/unexplained -update-readme -->"
	readmeDemoEnd     = "<!-- end of demo output -->"
	readmeSampleWidth = 110
)

var updateReadme = flag.Bool("update-readme", false, "rewrite the README's demo sample from the test's real run")

// readmeSample is the part of a demo's output the README shows: the
// parent's first line, the replies of the steps whose order is fixed (the
// tier-1 steps that are not configured finish in any order and are left
// out), each with its first line of detail, the outcome block's head and
// verdict, and the demo's last lines, URLs left out, run ids shortened and
// long lines cut.
func readmeSample(stdout string) (full, cut []string) {
	var out []string
	lines := strings.Split(stdout, "\n")
	keepNext := false
	for _, l := range lines {
		switch {
		case keepNext && strings.HasPrefix(l, "   ") && !strings.Contains(l, "http://"):
			out = append(out, l)
			keepNext = false
			continue
		case strings.HasPrefix(l, "── run ") && strings.Contains(l, " not configured: ") && strings.Contains(l, "tier 1)"):
			keepNext = false
			continue
		case strings.HasPrefix(l, "── run ") || strings.HasPrefix(l, "══ "):
			out = append(out, l)
			keepNext = true
			continue
		case strings.HasPrefix(l, "   artifacts: "):
			out = append(out, l)
		}
		keepNext = false
	}
	cut = make([]string, len(out))
	for i, l := range out {
		l = runIDs.ReplaceAllString(l, "${1}-…")
		l = testFolder.ReplaceAllString(l, "<folder>/data/")
		out[i] = l
		if r := []rune(l); len(r) > readmeSampleWidth {
			l = string(r[:readmeSampleWidth-2]) + " …"
		}
		cut[i] = l
	}
	return out, cut
}

var (
	// testFolder is the test's temporary --storage.path before the data
	// folder: the README says <folder>, as its prose does, not a path that
	// existed once on the machine that wrote it.
	testFolder = regexp.MustCompile(`\S*/data/`)
	runIDs     = regexp.MustCompile(`\b(01[0-9a-f]{6})-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`)
	// varying is what differs between two runs of the same demo: ids,
	// addresses, numbers and durations (a unit with them: a step that took
	// 0s once takes 1ms the next), dates and temporary folders.
	varying = regexp.MustCompile(`01[0-9a-f]{6}-…|/tmp/\S+|\d+\.\d+\.\d+\.\d+:\d+|(\d+(\.\d+)?(ns|µs|ms|s|m|h))+\b|\d+(\.\d+)?`)
)

// sameShape says whether a README sample line is this run's line with what
// varies between runs left out; a line the README cut (" …") need only
// begin the same.
func sameShape(readme, run string) bool {
	r := varying.ReplaceAllString(run, "#")
	if short, cut := strings.CutSuffix(readme, " …"); cut {
		return strings.HasPrefix(r, strings.TrimSuffix(varying.ReplaceAllString(short, "#"), "#"))
	}
	return varying.ReplaceAllString(readme, "#") == r
}

// TestSameShapeLeavesOutWhatVaries: two runs of the demo differ in ids,
// addresses, numbers and durations, whatever their unit, and in nothing
// else the README shows.
func TestSameShapeLeavesOutWhatVaries(t *testing.T) {
	for _, c := range []struct {
		readme, run string
		same        bool
	}{
		{"── run 01a249ee-… · step triage (triage, tier triage) succeeded in 0s", "── run 01a24b71-… · step triage (triage, tier triage) succeeded in 1ms", true},
		{"profile 127.0.0.1:34599 4.99s: GEMM 92% of GPU time", "profile 127.0.0.4:38763 4.998s: GEMM 91% of GPU time", true},
		{"── run 01a249ee-… succeeded after 19s ──", "── run 01a24b71-… succeeded after 1m2.5s ──", true},
		{"scrape of 127.0.0.1:34599 over 10s: queue_depth 1 · running 13 · …", "scrape of 127.0.0.4:38763 over 10s: queue_depth 0 · running 14 · kv_usage 0.03", true},
		{"── run 01a249ee-… succeeded after 19s ──", "── run 01a24b71-… failed after 19s ──", false},
		{"unexplained: ITL p99 0.299 s (threshold 0.2 s)", "unexplained: TTFT p99 0.299 s (threshold 0.2 s)", false},
	} {
		if got := sameShape(c.readme, c.run); got != c.same {
			t.Errorf("sameShape(%q, %q) = %v, want %v", c.readme, c.run, got, c.same)
		}
	}
}

// checkReadmeDemo holds the README's demo sample to this run's output, or
// rewrites it with -update-readme.
func checkReadmeDemo(t *testing.T, stdout string) {
	t.Helper()
	raw, err := os.ReadFile(readmeFile)
	if err != nil {
		t.Fatal(err)
	}
	begin, end := bytes.Index(raw, []byte(readmeDemoBegin)), bytes.Index(raw, []byte(readmeDemoEnd))
	if begin < 0 || end < begin {
		t.Fatalf("%s has no demo sample between %q and %q", readmeFile, readmeDemoBegin, readmeDemoEnd)
	}
	got, cut := readmeSample(stdout)
	if *updateReadme {
		block := readmeDemoBegin + "\n```\n" + strings.Join(cut, "\n") + "\n```\n"
		out := append(append(append([]byte{}, raw[:begin]...), block...), raw[end:]...)
		if err := os.WriteFile(readmeFile, out, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	body := strings.TrimSpace(string(raw[begin+len(readmeDemoBegin) : end]))
	body = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(body, "```"), "```"))
	want := strings.Split(body, "\n")
	ok := len(want) == len(got)
	for i := 0; ok && i < len(want); i++ {
		ok = sameShape(want[i], got[i])
	}
	if !ok {
		t.Errorf("the README's demo sample is stale (rerun with -update-readme):\nREADME:\n%s\nthis run:\n%s",
			strings.Join(want, "\n"), strings.Join(got, "\n"))
	}
}

// TestReadmeSampleNamesNoTestFolder: the README's demo sample shows where
// the artifacts are as <folder>, not the temporary folder of the test run
// that wrote it.
func TestReadmeSampleNamesNoTestFolder(t *testing.T) {
	raw, err := os.ReadFile(readmeFile)
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`/tmp/\S*|Test[A-Z]\w+\d{5,}`).Find(raw); m != nil {
		t.Errorf("the README names a test's temporary folder: %s", m)
	}
	_, cut := readmeSample("══ 01a23c3b-0000-0000-0000-000000000000 in 18.8s\n   artifacts: /tmp/TestDemoScenariosunexplained1754922611/001/data/artifacts/2026/x")
	if got := cut[len(cut)-1]; got != "   artifacts: <folder>/data/artifacts/2026/x" {
		t.Errorf("sample line %q, want the folder said as <folder>", got)
	}
}

// TestReadmeContents: the README's table of contents lists every section, in
// order, with links GitHub resolves.
func TestReadmeContents(t *testing.T) {
	raw, err := os.ReadFile(readmeFile)
	if err != nil {
		t.Fatal(err)
	}
	var headings, listed []string
	inFence := false
	for _, l := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(l, "```") {
			inFence = !inFence
		}
		if inFence {
			continue
		}
		if h, ok := strings.CutPrefix(l, "## "); ok && h != "Contents" {
			headings = append(headings, "["+h+"](#"+anchor(h)+")")
		}
		if m := tocEntry.FindStringSubmatch(l); m != nil {
			listed = append(listed, m[1])
		}
	}
	if strings.Join(listed, "\n") != strings.Join(headings, "\n") {
		t.Errorf("the contents list\n%s\nwant, from the sections\n%s", strings.Join(listed, "\n"), strings.Join(headings, "\n"))
	}
}

var tocEntry = regexp.MustCompile(`^- (\[[^\]]+\]\(#[^)]+\))$`)

// anchor is the id GitHub gives a heading: lower case, punctuation but '-'
// and '_' dropped, spaces made '-'.
func anchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// readmeMaxLines is the README's budget (issue 23): what it is, the demo, the
// two commands, the wiring, a playbook, the layout; the rest is in docs/.
const readmeMaxLines = 300

// TestReadmeStaysShort: the README fits its budget, and every docs/ page it
// links to exists.
func TestReadmeStaysShort(t *testing.T) {
	raw, err := os.ReadFile(readmeFile)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(raw), "\n"); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, the budget is %d: move the detail to docs/", n, readmeMaxLines)
	}
	for _, m := range docsLink.FindAllStringSubmatch(string(raw), -1) {
		if _, err := os.Stat("../../" + m[1]); err != nil {
			t.Errorf("README.md links to %s: %v", m[1], err)
		}
	}
}

var docsLink = regexp.MustCompile(`\]\((docs/[^)#]+)`)

// TestReadmeAlertByHand: the README's and docs/examples' curl examples post
// to serve's default address a committed file that is an Alertmanager v4
// body whose alerts name their alertname and instance, as the webhook needs.
func TestReadmeAlertByHand(t *testing.T) {
	curl := regexp.MustCompile(`curl -sS (\S+) -H 'Content-Type: application/json' --data @(\S+)`)
	want := "http://" + config.Default().Web.ListenAddress + "/hooks/alertmanager"
	seen := 0
	for _, doc := range []string{readmeFile, "../../docs/examples/README.md"} {
		raw, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range curl.FindAllStringSubmatch(string(raw), -1) {
			seen++
			if m[1] != want {
				t.Errorf("%s: curl posts to %s, want serve's default %s", doc, m[1], want)
			}
			body, err := os.ReadFile("../../" + m[2])
			if err != nil {
				t.Errorf("%s: curl sends %s: %v", doc, m[2], err)
				continue
			}
			var d template.Data
			if err := json.Unmarshal(body, &d); err != nil {
				t.Errorf("%s: %v", m[2], err)
				continue
			}
			if len(d.Alerts) == 0 || d.Receiver == "" {
				t.Errorf("%s: %d alerts, receiver %q: not a webhook body", m[2], len(d.Alerts), d.Receiver)
			}
			for _, a := range d.Alerts {
				if a.Labels["alertname"] == "" || a.Labels["instance"] == "" || a.Status != d.Status {
					t.Errorf("%s: alert %v (%s in a %s body) lacks what a run needs", m[2], a.Labels, a.Status, d.Status)
				}
			}
		}
	}
	if seen < 3 {
		t.Errorf("%d curl examples found, want the README's and docs/examples' (firing and resolved)", seen)
	}
}
