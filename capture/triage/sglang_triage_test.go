package triage

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/capture/scrape"
	"github.com/autocapture/autocapture/internal/testkit/fixtures"
	"github.com/autocapture/autocapture/vocab"
)

// doubled is a second scrape of a recorded SGLang server after it served the
// same traffic once more: counters and histograms doubled, gauges as they
// were (capture/scrape's sglang_test.go reads the same pairs signal by signal).
func doubled(t *testing.T, body []byte) []byte {
	t.Helper()
	var out strings.Builder
	for _, line := range strings.SplitAfter(string(body), "\n") {
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		if strings.HasPrefix(line, "#") || !(strings.HasSuffix(name, "_total") || strings.HasSuffix(name, "_bucket") ||
			strings.HasSuffix(name, "_count") || strings.HasSuffix(name, "_sum")) {
			out.WriteString(line)
			continue
		}
		i := strings.LastIndexByte(strings.TrimRight(line, "\n"), ' ')
		v, err := strconv.ParseFloat(strings.TrimSpace(line[i+1:]), 64)
		if err != nil {
			t.Fatalf("sample %q: %v", line, err)
		}
		out.WriteString(line[:i+1] + strconv.FormatFloat(2*v, 'g', -1, 64) + "\n")
	}
	return []byte(out.String())
}

// TestSGLangRecordedScrapesTriage judges SGLang's real scrapes (two scrapes
// 10 s apart: the file, then the same traffic again) as triage would on a
// run, and holds the evidence to the dialect: what the era does not expose
// is said so by name, never "not measured", and never given a number.
func TestSGLangRecordedScrapesTriage(t *testing.T) {
	cases := []struct {
		file, verdict string
		era           string
		evidence      []string // lines the evidence must hold
	}{
		{"v0.3.6-0.4-docs-llama3.1-8b-overloaded.prom", vocab.VerdictOverload, "SGLang v0.3.6–v0.4", []string{
			"queue 2826 waiting (threshold 10); batch 162 running",
			"prefill_time_mean: not exposed by SGLang v0.3.6–v0.4",
			"abort_ratio: not exposed by SGLang v0.3.6–v0.4",
			"preemptions_per_s: not exposed by SGLang v0.3.6–v0.4",
			"sglang also reports: cache_hit_rate_last_batch 0.00751, gen_throughput 86.5, num_used_tokens 1.24e+05",
		}},
		{"v0.3.5-2024-11-docs-gemma2-9b-name-label.prom", vocab.VerdictHealthy, "SGLang v0.3.5", []string{
			"prefill_time_mean: not exposed by SGLang v0.3.5",
			"abort_ratio: not exposed by SGLang v0.3.5",
		}},
		{"v0.3.6-0.4-docs-llama3.1-8b-one-request.prom", vocab.VerdictHealthy, "SGLang v0.3.6–v0.4", []string{
			"prefill_time_mean: not exposed by SGLang v0.3.6–v0.4",
		}},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			body := fixtures.Read(t, filepath.Join("sglang-metrics", c.file))
			step, _ := scrape.New(scrape.Config{})
			res := &vocab.Result{Findings: map[string]any{"target": "fixture"}}
			t0 := time.Unix(1.8e9, 0)
			if err := step.Analyse(res, step.SampleOf(body, t0), step.SampleOf(doubled(t, body), t0.Add(10*time.Second))); err != nil {
				t.Fatal(err)
			}
			tri, _ := New(Config{})
			out, err := tri.Run(context.Background(), &vocab.Input{Prior: map[string]*vocab.Result{"scrape": res}})
			if err != nil {
				t.Fatal(err)
			}
			v := out.Verdict
			ev := strings.Join(v.Evidence, "\n")
			if v.ID != c.verdict {
				t.Fatalf("verdict %s %v, want %s\n%s", v.ID, v.Contributing, c.verdict, ev)
			}
			for _, want := range c.evidence {
				if !strings.Contains(ev, want) {
					t.Errorf("evidence lacks %q:\n%s", want, ev)
				}
			}
			for _, l := range v.Evidence {
				if !strings.HasPrefix(l, "not measured:") {
					continue
				}
				for sig := range res.Findings[vocab.FindingNotExposed].(map[string]string) {
					if strings.Contains(l, sig) {
						t.Errorf("%s is not exposed by %s, yet said not measured: %q", sig, c.era, l)
					}
				}
			}
			checkEvidenceAgainstSignals(t, out.Signals, DefaultThresholds, v)
			// A resumed run reads the scrape's result back from its JSON record.
			b, err := json.Marshal(res)
			if err != nil {
				t.Fatal(err)
			}
			var stored vocab.Result
			if err := json.Unmarshal(b, &stored); err != nil {
				t.Fatal(err)
			}
			again, err := tri.Run(context.Background(), &vocab.Input{Prior: map[string]*vocab.Result{"scrape": &stored}})
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(again.Verdict.Evidence, "\n"); got != ev {
				t.Errorf("from the JSON record the evidence reads\n%s\nnot\n%s", got, ev)
			}
		})
	}
}
