package notify

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/vocab"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// TestConsoleThread renders one run's whole thread: opened (resumed), a step
// that succeeded with a link, one that failed, the run's resume (a notice, not
// a step), late uploads landing, and the close with a verdict and resolution;
// the verdict's parent edits before the replies print nothing.
// The golden file is what an operator reads on stdout.
func TestConsoleThread(t *testing.T) {
	var out bytes.Buffer
	c := NewConsole(&out)
	ctx := context.Background()
	at := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	th, err := c.Open(ctx, RunInfo{ID: "r1", Alert: template.Alert{StartsAt: at,
		Labels:      template.KV{"alertname": "VLLMHighTTFT", "instance": "10.0.0.7:8000"},
		Annotations: template.KV{"summary": "p99 TTFT 4.2s on 10.0.0.7:8000"}},
		Playbooks: []string{"vllm-high-ttft"}, Resumed: 1})
	if err != nil || th.TS != "r1" {
		t.Fatalf("open: %v %+v", err, th)
	}
	steps := []StepReport{
		{StepID: "snapshot", Kind: "prometheus", Tier: vocab.TierMetrics, Status: "succeeded", Duration: 132 * time.Millisecond,
			Summary: "20 PromQL queries in 0.13s", Links: []Link{{Name: "prometheus.json", URL: "file:///data/artifacts/runs/r1/snapshot/prometheus.json"},
				{Name: "scrape.json", URL: "https://bucket.s3.example/r1/scrape.json?X-Amz-Expires=3600", Valid: time.Hour}}},
		{StepID: "traces", Kind: "traces", Tier: vocab.TierTraces, Status: "failed", Duration: 3 * time.Millisecond,
			Reason: "refused", Error: "jaeger http://127.0.0.1:16686: connection refused"},
		{StepID: "scrape", Kind: "scrape", Tier: vocab.TierMetrics, Status: "succeeded", Duration: 5 * time.Second,
			Summary: "scrape of 10.0.0.7:8000 over 5s", Links: []Link{{Name: "scrape.txt", Pending: true}}},
		{StepID: "run", Kind: "run", Status: "running", Key: "run/resumed/2",
			Notice: "resumed by replica r1 after r0 stopped (kill or crash) — 2nd resume"},
		{StepID: "uploads", Kind: "run", Status: "succeeded", Key: "uploads/done/1",
			Notice: "late uploads done: 1 artifact kept in the local spool while the artifact store was unavailable is now in the store",
			Links:  []Link{{Name: "scrape.txt", URL: "https://bucket.s3.example/r1/scrape.txt?X-Amz-Expires=3600", Valid: time.Hour}}},
	}
	// The verdict's edits, delivered ahead of the replies as the runner
	// does, edit the parent in Slack; here they print nothing (the golden
	// has one outcome block, at the end).
	for _, key := range []string{KeyCloseVerdictPreliminary, KeyCloseVerdict} {
		if err := c.Close(ctx, th, Summary{RunID: "r1", Key: key, Status: "running",
			Verdict: &vocab.Verdict{ID: "overload", Evidence: []string{"queue 42 waiting (threshold 10)"}}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range steps {
		if err := c.Reply(ctx, th, r); err != nil {
			t.Fatal(err)
		}
	}
	resolved := at.Add(14 * time.Minute)
	if err := c.Close(ctx, th, Summary{RunID: "r1", Key: KeyCloseFinished, Status: "partial", Reason: "vllm-high-ttft: 1 of 6 steps did not finish: traces (refused)",
		Duration: 6 * time.Second, ResolvedAt: &resolved, Verdict: &vocab.Verdict{ID: "overload", Contributing: []string{"client-aborts"},
			Evidence: []string{"queue 42 waiting (threshold 10)"}, Advice: []string{"add an instance or route traffic away"}}}); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "console-thread.golden")
	if *update {
		if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(out.Bytes(), want) {
		t.Fatalf("console thread differs from %s (rerun with -update if intended):\n%s", golden, out.String())
	}
}

// TestConsoleNotConfigured: a step that could not run because something is
// not configured is one line naming what is missing, never "failed" or a
// "why" of a failure.
func TestConsoleNotConfigured(t *testing.T) {
	var out bytes.Buffer
	c := NewConsole(&out)
	err := c.Reply(context.Background(), Thread{TS: "r1"}, StepReport{StepID: "snapshot", Kind: "prometheus", Tier: vocab.TierMetrics,
		Status: vocab.StatusNotConfigured, Reason: "no Prometheus (set prometheus.url)"})
	if err != nil {
		t.Fatal(err)
	}
	if want := "── run r1 · step snapshot (prometheus, tier 1) not configured: no Prometheus (set prometheus.url)\n"; out.String() != want {
		t.Errorf("printed %q, want %q", out.String(), want)
	}
}
