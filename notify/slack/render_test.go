package slack

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/vocab"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var (
	at   = time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	kvVe = &vocab.Verdict{ID: "kv-pressure", Contributing: []string{"overload"},
		Evidence: []string{"KV cache 98% full (threshold 95%)", "1.2 preemptions/s (threshold 0.05/s)", "queue 42 waiting (threshold 10)"},
		Advice:   []string{"raise gpu_memory_utilization or lower max_num_seqs", "add an instance"}}
)

func testRun() notify.RunInfo {
	return notify.RunInfo{ID: "r1", Playbooks: []string{"vllm-high-ttft"}, Resumed: 1, Alert: template.Alert{
		StartsAt:     at,
		GeneratorURL: "http://prometheus:9090/graph?g0.expr=vllm_ttft",
		Labels:       template.KV{"alertname": "VLLMHighTTFT", "severity": "page", "instance": "10.0.0.7:8000", "model_name": "Qwen/Qwen2.5-1.5B"},
		Annotations:  template.KV{"summary": "p99 TTFT 4.2s on 10.0.0.7:8000 (> 2s) & rising"}}}
}

func testParent() Parent {
	return ParentFromRun(testRun(), []notify.Link{{Name: "Alert source", URL: testRun().Alert.GeneratorURL},
		{Name: "Grafana", URL: "https://grafana.example/d/vllm?var-instance=10.0.0.7%3A8000"},
		{Name: "Run", URL: "http://autocapture:9095/api/v1/runs/r1"}})
}

func step(id, kind string, tier vocab.Tier, status vocab.Status, summary string) notify.StepReport {
	return notify.StepReport{RunID: "r1", StepID: id, Kind: kind, Tier: tier, Status: status, Summary: summary,
		Duration: 132 * time.Millisecond, Plan: "vllm-high-ttft", Key: "step/vllm-high-ttft/" + id}
}

// TestRenderGolden pins every message kind the on-call reads.
func TestRenderGolden(t *testing.T) {
	resolved := at.Add(14 * time.Minute)
	long := strings.Repeat("connection reset by peer; ", 400)
	chart := step("kv_chart", "chart", vocab.TierMetrics, "succeeded", "KV cache usage: 1 series, max 0.98 ratio")
	chart.Files = []notify.File{{Name: "chart.png", Key: "runs/r1/kv_chart/chart.png", ContentType: "image/png", Size: 5120}}
	chart.Links = []notify.Link{{Name: "chart.png", URL: "file:///data/artifacts/runs/r1/kv_chart/chart.png"}}
	snapshot := step("snapshot", "prometheus", vocab.TierMetrics, "succeeded", "20 PromQL queries in 0.13s; kv 0.98, queue 42, ttft p99 4.2s")
	snapshot.Links = []notify.Link{{Name: "prometheus.json", URL: "https://autocapture.example/artifacts/runs/r1/snapshot/prometheus.json"}}
	traces := step("traces", "traces", vocab.TierTraces, "succeeded",
		"slowest 5 of 212 llm_request spans by ttft: 4.81s..3.02s; worst 4bf92f35 (queue 3.90s, prefill 0.70s, decode 0.21s)")
	traces.Duration = 2400 * time.Millisecond
	for _, id := range []string{"4bf92f3577b34da6", "a3ce929d0e0e4736", "00f067aa0ba902b7"} {
		traces.Links = append(traces.Links, notify.Link{Name: "trace " + id[:8], URL: "http://jaeger:16686/trace/" + id})
	}
	failed := step("traces", "traces", vocab.TierTraces, "failed", "")
	failed.Reason, failed.Error, failed.Duration = "unreachable", "jaeger http://127.0.0.1:16686:\nconnection refused", 3*time.Millisecond
	skipped := step("profile", "profile", vocab.TierProfile, "skipped", "")
	skipped.Reason = "when: steps.triage.verdict == \"decode-bound\" is false"
	cancelled := step("profile", "profile", vocab.TierProfile, "cancelled", "")
	cancelled.Reason = "the alert resolved"
	truncated := step("scrape", "scrape", vocab.TierMetrics, "failed", strings.Repeat("x", 4000))
	truncated.Reason, truncated.Error = "upstream-5xx", long

	verdictParent := testParent().Apply(notify.Summary{RunID: "r1", Key: notify.KeyCloseVerdict, Status: "running", Verdict: kvVe})
	verdictParent.AskFeedback = true
	noFeedback := verdictParent
	noFeedback.AskFeedback = false
	finished := notify.Summary{RunID: "r1", Key: notify.KeyCloseFinished, Status: "partial", Duration: 6*time.Minute + 5*time.Second,
		Reason: "vllm-high-ttft: 1 of 6 steps did not finish: traces (unreachable)", Verdict: kvVe}
	finishedParent := verdictParent.Apply(finished)
	resolvedSum := notify.Summary{RunID: "r1", Key: notify.KeyCloseResolved, Status: "partial", ResolvedAt: &resolved}
	resolvedParent := finishedParent.Apply(resolvedSum)

	cases := []struct {
		name string
		msg  Message
	}{
		{"parent", RenderParent(testParent())},
		{"parent-verdict", RenderParent(verdictParent)},
		{"parent-resolved", RenderParent(resolvedParent)},
		{"parent-verdict-no-interactivity", RenderParent(noFeedback)},
		{"parent-capturing-asks-nothing", RenderParent(func() Parent { p := testParent(); p.AskFeedback = true; return p }())},
		{"reply-prometheus", RenderReply(snapshot)},
		{"reply-scrape", RenderReply(step("scrape", "scrape", vocab.TierMetrics, "succeeded", "scrape of 10.0.0.7:8000 over 5s: kv 0.98, running 64, waiting 42"))},
		{"reply-triage", RenderReply(func() notify.StepReport {
			r := step("triage", "triage", vocab.TierTriage, "succeeded", "kv-pressure (also overload): KV cache 98% full (threshold 95%)")
			r.Verdict = kvVe
			return r
		}())},
		{"reply-traces", RenderReply(traces)},
		{"reply-presigned", RenderReply(func() notify.StepReport {
			r := snapshot
			r.Links = []notify.Link{{Name: "prometheus.json", Valid: 7 * 24 * time.Hour,
				URL: "https://bucket.s3.example/2026/11/29/VLLMHighTTFT/r1/vllm-high-ttft/snapshot/prometheus.json?X-Amz-Expires=604800&X-Amz-Signature=abc"}}
			return r
		}())},
		{"reply-chart", RenderReply(chart)},
		{"reply-upload-pending", RenderReply(func() notify.StepReport {
			r := snapshot
			r.Links = []notify.Link{{Name: "prometheus.json", Pending: true}}
			return r
		}())},
		{"reply-failed", RenderReply(failed)},
		{"reply-skipped", RenderReply(skipped)},
		{"reply-cancelled", RenderReply(cancelled)},
		{"reply-truncated", RenderReply(truncated)},
		{"reply-resumed", RenderNotice(notify.StepReport{RunID: "r1", StepID: "run", Kind: "run", Status: "running",
			Key: "run/resumed/2", Notice: "resumed by replica r1 after r0 stopped (kill or crash) — 2nd resume"})},
		{"reply-uploads-done", RenderNotice(notify.StepReport{RunID: "r1", StepID: "uploads", Kind: "run", Status: "succeeded",
			Key: "uploads/done/1", Notice: "late uploads done: 1 artifact kept in the local spool while the artifact store was unavailable is now in the store",
			Links: []notify.Link{{Name: "prometheus.json", URL: "https://autocapture.example/artifacts/runs/r1/snapshot/prometheus.json"}}})},
		{"close-finished", RenderCloseReply(finishedParent, finished)},
		{"close-resolved", RenderCloseReply(resolvedParent, resolvedSum)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			checkLimits(t, c.msg)
			got, err := json.MarshalIndent(c.msg, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			golden := filepath.Join("testdata", c.name+".golden")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s differs (rerun with -update if intended):\n%s", golden, got)
			}
		})
	}
}

// checkLimits holds a message to Slack's limits: every section's text, field,
// header and the fallback.
func checkLimits(t *testing.T, m Message) {
	t.Helper()
	if n := len([]rune(m.Text)); n > maxFallback {
		t.Errorf("fallback text %d chars", n)
	}
	raw, _ := json.Marshal(m.Blocks)
	var blocks []struct {
		Type   string `json:"type"`
		Text   *struct{ Text string }
		Fields []struct{ Text string }
	}
	json.Unmarshal(raw, &blocks)
	if len(blocks) > 50 || len(raw) > 12000 {
		t.Errorf("%d blocks, %d bytes", len(blocks), len(raw))
	}
	for _, b := range blocks {
		limit := maxSection
		if b.Type == "header" {
			limit = maxHeader
		}
		if b.Text != nil && len([]rune(b.Text.Text)) > limit {
			t.Errorf("%s block text %d chars", b.Type, len([]rune(b.Text.Text)))
		}
		for _, f := range b.Fields {
			if len([]rune(f.Text)) > maxField {
				t.Errorf("field %d chars", len([]rune(f.Text)))
			}
		}
	}
}

// TestParentRoundTripsThroughMetadata: Close re-renders the parent from its
// metadata alone, so what the payload keeps must give the same message.
func TestParentRoundTripsThroughMetadata(t *testing.T) {
	p := testParent().Apply(notify.Summary{Key: notify.KeyCloseFinished, Status: "succeeded", Duration: time.Minute, Verdict: kvVe})
	raw, _ := json.Marshal(parentPayload(p))
	var payload map[string]any
	json.Unmarshal(raw, &payload)
	back := parentFromPayload("r1", payload)
	a, _ := json.Marshal(RenderParent(p))
	b, _ := json.Marshal(RenderParent(back))
	if !bytes.Equal(a, b) {
		t.Fatalf("parent changed through metadata:\n%s\n%s", a, b)
	}
}

// TestFeedbackValueRoundTrips: the handler reads back what the button carries.
func TestFeedbackValueRoundTrips(t *testing.T) {
	for _, c := range []struct{ run, verdict string }{{"r1", "kv-pressure"}, {"0190-abc|odd", "overload"}} {
		run, verdict, ok := ParseFeedbackValue(FeedbackValue(c.run, c.verdict))
		if !ok || run != c.run || verdict != c.verdict {
			t.Errorf("%q|%q came back as %q, %q, %v", c.run, c.verdict, run, verdict, ok)
		}
	}
	for _, bad := range []string{"", "r1", "|kv-pressure", "r1|"} {
		if _, _, ok := ParseFeedbackValue(bad); ok {
			t.Errorf("ParseFeedbackValue(%q) ok", bad)
		}
	}
}

func TestFmtDur(t *testing.T) {
	for d, want := range map[time.Duration]string{132 * time.Millisecond: "132ms", 6200 * time.Millisecond: "6.2s",
		14 * time.Minute: "14m", 6*time.Minute + 5*time.Second: "6m5s", 62 * time.Minute: "1h2m"} {
		if got := fmtDur(d); got != want {
			t.Errorf("fmtDur(%s) = %s, want %s", d, got, want)
		}
	}
}

// TestRenderNotConfigured: a step whose backend is not configured is grey
// and says in words what is missing, in the blocks and the fallback text.
func TestRenderNotConfigured(t *testing.T) {
	m := RenderReply(notify.StepReport{StepID: "snapshot", Kind: "prometheus", Tier: vocab.TierMetrics,
		Status: vocab.StatusNotConfigured, Reason: "no Prometheus (set prometheus.url)"})
	b, err := json.Marshal(m.Blocks)
	if err != nil {
		t.Fatal(err)
	}
	blocks := string(b)
	for _, want := range []string{":white_circle: *snapshot* (prometheus, tier 1) not configured: no Prometheus (set prometheus.url)"} {
		if !strings.Contains(blocks, want) {
			t.Errorf("blocks %s lack %q", blocks, want)
		}
	}
	if strings.Contains(blocks, "why") || strings.Contains(blocks, ":x:") || !strings.Contains(m.Text, "not configured") {
		t.Errorf("a not-configured step reads as a failure: %s / %q", blocks, m.Text)
	}
}

// TestNoticesAreShownWhateverTheirStatus: a skipped step's reply is posted
// only with post_skipped, but a notice about the run (a cooldown repeat
// recorded with the skipped run's status) always is.
func TestNoticesAreShownWhateverTheirStatus(t *testing.T) {
	skipped := notify.StepReport{StepID: "scrape", Status: "skipped"}
	if shown(skipped, false) || !shown(skipped, true) {
		t.Errorf("a skipped step: shown %v without post_skipped, %v with it", shown(skipped, false), shown(skipped, true))
	}
	notice := notify.StepReport{StepID: "run", Status: "skipped", Notice: "fired again at 03:12:05 UTC"}
	if !shown(notice, false) {
		t.Error("a notice with a skipped status is not posted")
	}
}

// TestParentOffersProfileAgain: "Profile again" is on the parent of a run
// whose playbooks have a profile step, where the action is on, resolved
// or not, and survives a re-render from the metadata; nowhere else. A
// comparison's kernel names are the trace's, and reach Slack escaped.
func TestParentOffersProfileAgain(t *testing.T) {
	has := func(p Parent) bool {
		raw, _ := json.Marshal(RenderParent(p))
		return bytes.Contains(raw, []byte(`"action_id":"`+ActionProfileAgain+`","value":"r1"`))
	}
	p := testParent()
	p.RunID, p.AskProfile, p.Profilable = "r1", true, true
	if !has(p) {
		t.Fatal("no Profile again on a profilable run's parent")
	}
	raw, _ := json.Marshal(parentPayload(p))
	var payload map[string]any
	json.Unmarshal(raw, &payload)
	back := parentFromPayload("r1", payload)
	back.AskProfile = true
	if !has(back) {
		t.Error("the button is lost through the metadata")
	}
	if p.Resolved = true; !has(p) {
		t.Error("no Profile again once resolved")
	}
	for name, q := range map[string]Parent{"action off": {RunID: "r1", Profilable: true}, "no profile step": {RunID: "r1", AskProfile: true}} {
		if has(q) {
			t.Errorf("%s: the parent offers Profile again", name)
		}
	}
	msg, _ := json.Marshal(RenderNotice(notify.StepReport{Notice: "alice asked to profile 10.0.0.7:8000 again: GEMM 81%",
		Summary: "top kernel now: <!here> <https://evil|x> 61%"}))
	if bytes.Contains(msg, []byte("<!here>")) || bytes.Contains(msg, []byte("<https://evil")) {
		t.Errorf("a kernel's name reached Slack as markup: %s", msg)
	}
}
