package config

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

func TestRetentionDefaultsKeepRunsForEver(t *testing.T) {
	r := Default().Retention
	if r.Runs != 0 || r.Artifacts != RetainArtifactsDelete || r.Interval != time.Hour {
		t.Fatalf("default retention = %+v, want runs 0 (for ever), artifacts delete, interval 1h", r)
	}
}

func TestRetentionParsesDaysAndWeeks(t *testing.T) {
	for in, want := range map[string]time.Duration{"30d": 30 * 24 * time.Hour, "2w": 14 * 24 * time.Hour,
		"36h": 36 * time.Hour, "1d12h": 36 * time.Hour, "0": 0} {
		cfg, err := Parse("c.yaml", []byte("retention:\n  runs: "+in+"\n  artifacts: bucket\n  interval: 10m\n"))
		if err != nil {
			t.Fatalf("runs: %s: %v", in, err)
		}
		if time.Duration(cfg.Retention.Runs) != want || cfg.Retention.Artifacts != "bucket" || cfg.Retention.Interval != 10*time.Minute {
			t.Errorf("runs: %s gave %+v, want %v, bucket, 10m", in, cfg.Retention, want)
		}
	}
	cfg, _ := Parse("c.yaml", []byte("retention:\n  runs: 30d\n"))
	if j, _ := json.Marshal(cfg.Retention); !strings.Contains(string(j), `"runs":"30d"`) {
		t.Errorf("retention prints as %s, want runs \"30d\"", j)
	}
}

func TestRetentionValidationNamesLines(t *testing.T) {
	checkParseErrors(t, []parseErrCase{
		{"runs not a duration", "retention:\n  runs: a month\n", []string{"c.yaml:2:9:", "want a duration such as 30d"}},
		{"runs negative", "retention:\n  runs: -1d\n", []string{"c.yaml:2:9:"}},
		{"runs too short", "retention:\n  runs: 10m\n", []string{"c.yaml:2:9: retention.runs: 10m: want at least 1h"}},
		{"unknown artifacts", "retention:\n  runs: 30d\n  artifacts: keep\n", []string{"c.yaml:3:14: retention.artifacts: want delete"}},
		{"interval too short", "retention:\n  interval: 1s\n", []string{"c.yaml:2:13: retention.interval: 1s: want at least 1m"}},
		{"unknown field", "retention:\n  days: 30\n", []string{"c.yaml:2:3: unknown field \"days\""}},
	}, nil)
}

// TestDocumentedRetentionExamplesParse: the retention: examples of
// docs/storage.md and storage/README.md load (docs that drift fail here).
func TestDocumentedRetentionExamplesParse(t *testing.T) {
	n := 0
	for _, doc := range []string{"../docs/storage.md", "../storage/README.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, block := range strings.Split(string(b), "```yaml\n")[1:] {
			y, _, _ := strings.Cut(block, "```")
			if !strings.HasPrefix(y, "retention:\n") {
				continue
			}
			n++
			if _, err := Parse(doc, []byte(y)); err != nil {
				t.Errorf("%s example:\n%s\n%v", doc, y, err)
			}
		}
	}
	if n < 2 {
		t.Errorf("%d retention examples in docs/storage.md and storage/README.md, want one in each", n)
	}
}
