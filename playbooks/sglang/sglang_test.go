package sglang_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"
	"github.com/prometheus/prometheus/promql/parser"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/playbooks/playtest"
	"github.com/autocapture/autocapture/vocab"
)

// The SGLang alerts and the playbook each routes to (deploy/prometheus/sglang-alerts.yml).
var routes = map[string]string{
	"SGLangHighTTFT":        "sglang-high-ttft",
	"SGLangHighITL":         "sglang-high-itl",
	"SGLangKVCachePressure": "sglang-kv-pressure",
	"SGLangQueueDeep":       "sglang-queue-deep",
	"SGLangHighAbortRatio":  "sglang-abort-ratio",
}

// TestShippedSGLangPlaybooks: in the shipped set, each SGLang alert routes to
// its SGLang playbook, which carries test cases that pass, and whose steps
// speak SGLang's dialect only (a vllm: series in an SGLang query would read
// nothing on an SGLang server).
func TestShippedSGLangPlaybooks(t *testing.T) {
	set, err := playbooks.Load(playbooks.Shipped, zap.NewNop())
	if err != nil {
		t.Fatalf("shipped playbooks: %v", err)
	}
	tested := map[string]int{}
	for _, tc := range set.Tests {
		if !strings.HasPrefix(tc.File, playbooks.EmbeddedSGLangPrefix) {
			continue
		}
		t.Run(tc.Name, func(t *testing.T) {
			o := playtest.Run(context.Background(), tc, nil, zap.NewNop())
			for _, f := range o.Failures {
				t.Errorf("%s: %s", o.Where(), f)
			}
		})
		tested[tc.File]++
	}
	vllmSeries := regexp.MustCompile(`vllm:[a-z_]+`)
	for alert, name := range routes {
		got := playbooks.Match(set.Playbooks, map[string]string{"alertname": alert, "instance": "10.0.1.7:30000", "model_name": "m"})
		if len(got) != 1 || got[0].Name != name {
			t.Errorf("%s routes to %v, want %s", alert, got, name)
			continue
		}
		pb := got[0]
		if !strings.HasPrefix(pb.File, playbooks.EmbeddedSGLangPrefix) || tested[pb.File] < 2 {
			t.Errorf("%s: from %s with %d test cases, want shipped with at least 2", name, pb.File, tested[pb.File])
		}
		src := string(pb.Source) // self-contained: the presets it uses included
		if m := vllmSeries.FindString(src); m != "" || !strings.Contains(src, "sglang:num_queue_reqs") {
			t.Errorf("%s reads vLLM's %q, or not the sglang-evidence preset", name, m)
		}
	}
}

// TestSGLangQueriesParse plans every SGLang playbook for a complete alert and
// parses every PromQL query its steps render (snapshot, peers, charts), so a
// query that Prometheus would reject fails here, before any server runs it;
// and its traces step looks for SGLang's spans.
func TestSGLangQueriesParse(t *testing.T) {
	set, err := playbooks.Load(playbooks.Shipped, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	n := 0
	for _, pb := range set.Playbooks {
		if !strings.HasPrefix(pb.File, playbooks.EmbeddedSGLangPrefix) {
			continue
		}
		a := template.Alert{Status: "firing", StartsAt: start, Labels: template.KV{
			"alertname": "x", "instance": "10.0.1.7:30000", "model_name": "m", "severity": "page"}}
		plan := pb.Plan(a, vocab.Window{Start: start.Add(-10 * time.Minute), End: start})
		for _, st := range plan.Steps {
			if st.RenderErr != nil {
				t.Errorf("%s/%s: %v", pb.Name, st.ID, st.RenderErr)
				continue
			}
			b, err := json.Marshal(st.Config)
			if err != nil {
				t.Fatal(err)
			}
			var cfg any
			json.Unmarshal(b, &cfg)
			if m, _ := cfg.(map[string]any); st.Kind == "traces" && m["engine"] != "sglang" {
				t.Errorf("%s/%s: traces of engine %v, want sglang (SGLang's Req spans, service sglang)", pb.Name, st.ID, m["engine"])
			}
			for _, q := range queries(cfg) {
				n++
				q = strings.ReplaceAll(q, "$peers", `model_name="m"`) // the peers step's selector
				if _, err := parser.NewParser(parser.Options{}).ParseExpr(q); err != nil {
					t.Errorf("%s/%s: %q: %v", pb.Name, st.ID, q, err)
				}
			}
		}
	}
	if n < 5*25 { // each playbook: 21 snapshot, 10 peers, its charts
		t.Fatalf("only %d queries found in the SGLang playbooks", n)
	}
}

// queries collects every string under a "query" key of a decoded config.
func queries(v any) []string {
	var out []string
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && k == "query" {
				out = append(out, s)
			} else {
				out = append(out, queries(e)...)
			}
		}
	case []any:
		for _, e := range x {
			out = append(out, queries(e)...)
		}
	}
	return out
}

// TestSGLangSnapshotQueriesOnSeries evaluates the sglang-evidence snapshot's
// queries, as planned for an alert on new:30000, with promtool against
// series of a 2026 SGLang instance exported by every scheduler rank (two DP
// ranks of two TP ranks, priority scheduling on), with a second instance
// beside it: each must read what the scrape step reads from the same page
// (SGLANG.md §1 aggregation, streamed TTFT only, an absent abort series as 0).
func TestSGLangSnapshotQueriesOnSeries(t *testing.T) {
	set, err := playbooks.Load(playbooks.Shipped, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	got := playbooks.Match(set.Playbooks, map[string]string{"alertname": "SGLangHighTTFT"})
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	plan := got[0].Plan(template.Alert{Status: "firing", StartsAt: start, Labels: template.KV{
		"alertname": "SGLangHighTTFT", "instance": "new:30000", "model_name": "m", "severity": "page"}},
		vocab.Window{Start: start.Add(-10 * time.Minute), End: start})
	queries := map[string]string{}
	for _, st := range plan.Steps {
		if st.ID != "snapshot" {
			continue
		}
		b, _ := json.Marshal(st.Config)
		var cfg struct {
			Queries []struct{ Name, Query string } `json:"queries"`
		}
		if err := json.Unmarshal(b, &cfg); err != nil {
			t.Fatal(err)
		}
		for _, q := range cfg.Queries {
			queries[q.Name] = q.Query
		}
	}
	want := map[string]string{
		"queue":            "15",    // 12 on DP 0 (seen by both its TP ranks; priority 1's 7 is part of it) + 3 on DP 1
		"running":          "64",    // 30 + 34
		"kv":               "0.99",  // the fullest rank
		"preemptions":      "1",     // 60 retractions a minute
		"ttft_p99":         "4.975", // streamed only: 2.5 + 2.5×0.99 (with the non-streamed, the +Inf bucket: 5)
		"itl_p99":          "0.398", // 0.2 + 0.2×0.99
		"queue_time":       "2",     // 100 s over 50 requests
		"prefill_time":     "0.5",   // stage prefill_forward: 25 s over 50; decode_waiting ignored
		"abort_ratio":      "0",     // no abort series yet: 0 of the finished
		"prefix_hit_ratio": "0.25",  // 1000 cached of 4000 prefilled tokens
		"prompt_tokens":    "40",    // 4000 prompt tokens over 100 finished
	}
	var cases strings.Builder
	for name, v := range want {
		q, ok := queries[name]
		if !ok {
			t.Fatalf("no snapshot query %q", name)
		}
		fmt.Fprintf(&cases, "      - expr: %q\n        eval_time: 10m\n        exp_samples:\n          - value: %s\n", "round("+q+", 0.001)", v)
	}
	const series = `
      - {series: 'sglang:num_queue_reqs{instance="new:30000",model_name="m",tp_rank="0",dp_rank="0",priority=""}', values: '12x15'}
      - {series: 'sglang:num_queue_reqs{instance="new:30000",model_name="m",tp_rank="1",dp_rank="0",priority=""}', values: '12x15'}
      - {series: 'sglang:num_queue_reqs{instance="new:30000",model_name="m",tp_rank="0",dp_rank="0",priority="1"}', values: '7x15'}
      - {series: 'sglang:num_queue_reqs{instance="new:30000",model_name="m",tp_rank="0",dp_rank="1",priority=""}', values: '3x15'}
      - {series: 'sglang:num_queue_reqs{instance="other:30000",model_name="m",tp_rank="0",dp_rank="0",priority=""}', values: '500x15'}
      - {series: 'sglang:num_running_reqs{instance="new:30000",model_name="m",tp_rank="0",dp_rank="0",priority=""}', values: '30x15'}
      - {series: 'sglang:num_running_reqs{instance="new:30000",model_name="m",tp_rank="1",dp_rank="0",priority=""}', values: '30x15'}
      - {series: 'sglang:num_running_reqs{instance="new:30000",model_name="m",tp_rank="0",dp_rank="1",priority=""}', values: '34x15'}
      - {series: 'sglang:token_usage{instance="new:30000",model_name="m",tp_rank="0",dp_rank="0",priority=""}', values: '0.5x15'}
      - {series: 'sglang:token_usage{instance="new:30000",model_name="m",tp_rank="0",dp_rank="1",priority=""}', values: '0.99x15'}
      - {series: 'sglang:num_retracted_requests_total{instance="new:30000",model_name="m",tp_rank="0",dp_rank="0",priority=""}', values: '0+60x15'}
      - {series: 'sglang:time_to_first_token_seconds_bucket{instance="new:30000",model_name="m",is_streaming="true",le="2.5"}', values: '0+0x15'}
      - {series: 'sglang:time_to_first_token_seconds_bucket{instance="new:30000",model_name="m",is_streaming="true",le="5"}', values: '0+100x15'}
      - {series: 'sglang:time_to_first_token_seconds_bucket{instance="new:30000",model_name="m",is_streaming="true",le="+Inf"}', values: '0+100x15'}
      - {series: 'sglang:time_to_first_token_seconds_bucket{instance="new:30000",model_name="m",is_streaming="false",le="5"}', values: '0+0x15'}
      - {series: 'sglang:time_to_first_token_seconds_bucket{instance="new:30000",model_name="m",is_streaming="false",le="+Inf"}', values: '0+500x15'}
      - {series: 'sglang:inter_token_latency_seconds_bucket{instance="new:30000",model_name="m",le="0.2"}', values: '0+0x15'}
      - {series: 'sglang:inter_token_latency_seconds_bucket{instance="new:30000",model_name="m",le="0.4"}', values: '0+1000x15'}
      - {series: 'sglang:inter_token_latency_seconds_bucket{instance="new:30000",model_name="m",le="+Inf"}', values: '0+1000x15'}
      - {series: 'sglang:queue_time_seconds_sum{instance="new:30000",model_name="m",tp_rank="0",dp_rank="0",priority=""}', values: '0+100x15'}
      - {series: 'sglang:queue_time_seconds_count{instance="new:30000",model_name="m",tp_rank="0",dp_rank="0",priority=""}', values: '0+50x15'}
      - {series: 'sglang:per_stage_req_latency_seconds_sum{instance="new:30000",model_name="m",stage="prefill_forward"}', values: '0+25x15'}
      - {series: 'sglang:per_stage_req_latency_seconds_count{instance="new:30000",model_name="m",stage="prefill_forward"}', values: '0+50x15'}
      - {series: 'sglang:per_stage_req_latency_seconds_sum{instance="new:30000",model_name="m",stage="decode_waiting"}', values: '0+500x15'}
      - {series: 'sglang:per_stage_req_latency_seconds_count{instance="new:30000",model_name="m",stage="decode_waiting"}', values: '0+50x15'}
      - {series: 'sglang:num_requests_total{instance="new:30000",model_name="m",is_streaming="true"}', values: '0+100x15'}
      - {series: 'sglang:num_aborted_requests_total{instance="other:30000",model_name="m"}', values: '0+50x15'}
      - {series: 'sglang:realtime_tokens_total{instance="new:30000",model_name="m",mode="prefill_compute"}', values: '0+3000x15'}
      - {series: 'sglang:realtime_tokens_total{instance="new:30000",model_name="m",mode="prefill_cache"}', values: '0+1000x15'}
      - {series: 'sglang:realtime_tokens_total{instance="new:30000",model_name="m",mode="decode"}', values: '0+9000x15'}
      - {series: 'sglang:prompt_tokens_total{instance="new:30000",model_name="m",is_streaming="true"}', values: '0+4000x15'}
      - {series: 'sglang:e2e_request_latency_seconds_count{instance="new:30000",model_name="m",is_streaming="true"}', values: '0+100x15'}
`
	test := "rule_files: []\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:" + series + "    promql_expr_test:\n" + cases.String()
	path := filepath.Join(t.TempDir(), "snapshot_test.yml")
	if err := os.WriteFile(path, []byte(test), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(testenv.Tool(t, "promtool"), "test", "rules", path).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "SUCCESS") {
		t.Errorf("promtool: %v\n%s", err, out)
	}
}
