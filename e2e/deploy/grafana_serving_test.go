package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
)

// The serving dashboard (grafana/serving.json) puts vLLM's and SGLang's
// queries of each signal side by side: every panel of its first row holds
// vLLM's (A) and SGLang's (B), each naming only its own engine's series.

const servingDashboard = "grafana/serving.json"

// servingVars stand for the serving dashboard's variables.
var servingVars = strings.NewReplacer("$__rate_interval", "5m", "$model_name", ".+", "$instance", ".+")

// engineOf names the engine of an expression's series: "vllm", "sglang",
// "mixed" or "" (none).
func engineOf(t *testing.T, e exprSource) string {
	t.Helper()
	expr, err := parser.NewParser(parser.Options{}).ParseExpr(servingVars.Replace(e.expr))
	if err != nil {
		t.Fatalf("%s: %q: %v", e.where, e.expr, err)
	}
	engines := map[string]bool{}
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			prefix, _, _ := strings.Cut(vs.Name, ":")
			engines[prefix] = true
		}
		return nil
	})
	switch {
	case len(engines) == 1 && engines["vllm"]:
		return "vllm"
	case len(engines) == 1 && engines["sglang"]:
		return "sglang"
	case len(engines) == 0:
		return ""
	}
	return "mixed"
}

func TestServingDashboardHasBothEngines(t *testing.T) {
	parallel(t)
	exprs := dashboardExprsOf(t, servingDashboard)
	byPanel := map[string]map[string]string{} // panel → refId → engine
	for _, e := range exprs {
		panel, ref, _ := strings.Cut(strings.TrimPrefix(e.where, "panel "), " query ")
		if byPanel[panel] == nil {
			byPanel[panel] = map[string]string{}
		}
		byPanel[panel][ref] = engineOf(t, e)
	}
	both, sglangOnly := 0, 0
	for panel, refs := range byPanel {
		switch {
		case len(refs) == 2 && refs["A"] == "vllm" && refs["B"] == "sglang":
			both++
		case !strings.Contains(fmt.Sprint(refs), "vllm") && !strings.Contains(fmt.Sprint(refs), "mixed"):
			sglangOnly++
		default:
			t.Errorf("panel %s: queries %v, want vLLM's in A and SGLang's in B, or SGLang's only", panel, refs)
		}
	}
	if both < 10 || sglangOnly < 3 {
		t.Errorf("%d panels for both engines, %d for SGLang only; want the triage signals (10+) and SGLang's extras (3)", both, sglangOnly)
	}
}

// TestServingDashboardSGLangQueries evaluates the dashboard's SGLang queries
// with promtool against series of one instance exported by every scheduler
// rank (two DP ranks, two TP ranks, priority scheduling on): each must read
// what the alerts read (SGLANG.md §1 aggregation, streamed TTFT only).
func TestServingDashboardSGLangQueries(t *testing.T) {
	parallel(t)
	want := map[string]string{ // panel title → the value its SGLang query must give
		"Requests waiting":                   "15",
		"KV cache usage":                     "0.99",
		"Share of finished requests aborted": "0.1",
		"p99 time to first token":            "4.975", // 2.5 + 2.5×0.99: streamed only (with the 500 non-streamed, the +Inf bucket: 5)
	}
	var cases strings.Builder
	for _, e := range dashboardExprsOf(t, servingDashboard) {
		panel, ref, _ := strings.Cut(strings.TrimPrefix(e.where, "panel "), " query ")
		v, ok := want[strings.Trim(panel, `"`)]
		if !ok || ref != "B" {
			continue
		}
		delete(want, strings.Trim(panel, `"`))
		fmt.Fprintf(&cases, "      - expr: %q\n        eval_time: 10m\n        exp_samples:\n          - labels: '{instance=\"new:30000\"}'\n            value: %s\n",
			servingVars.Replace(e.expr), v)
	}
	if len(want) > 0 {
		t.Fatalf("panels not found: %v", want)
	}
	const series = `
      - {series: 'sglang:num_queue_reqs{instance="new:30000",model_name="m",tp_rank="0",dp_rank="0",priority=""}', values: '12x15'}
      - {series: 'sglang:num_queue_reqs{instance="new:30000",model_name="m",tp_rank="1",dp_rank="0",priority=""}', values: '12x15'}
      - {series: 'sglang:num_queue_reqs{instance="new:30000",model_name="m",tp_rank="0",dp_rank="0",priority="1"}', values: '7x15'}
      - {series: 'sglang:num_queue_reqs{instance="new:30000",model_name="m",tp_rank="0",dp_rank="1",priority=""}', values: '3x15'}
      - {series: 'sglang:token_usage{instance="new:30000",model_name="m",tp_rank="0",dp_rank="0",priority=""}', values: '0.5x15'}
      - {series: 'sglang:token_usage{instance="new:30000",model_name="m",tp_rank="0",dp_rank="1",priority=""}', values: '0.99x15'}
      - {series: 'sglang:num_requests_total{instance="new:30000",model_name="m",is_streaming="true"}', values: '0+60x15'}
      - {series: 'sglang:num_requests_total{instance="new:30000",model_name="m",is_streaming="false"}', values: '0+40x15'}
      - {series: 'sglang:num_aborted_requests_total{instance="new:30000",model_name="m"}', values: '0+10x15'}
      - {series: 'sglang:time_to_first_token_seconds_bucket{instance="new:30000",model_name="m",is_streaming="true",le="2.5"}', values: '0+0x15'}
      - {series: 'sglang:time_to_first_token_seconds_bucket{instance="new:30000",model_name="m",is_streaming="true",le="5"}', values: '0+100x15'}
      - {series: 'sglang:time_to_first_token_seconds_bucket{instance="new:30000",model_name="m",is_streaming="true",le="+Inf"}', values: '0+100x15'}
      - {series: 'sglang:time_to_first_token_seconds_bucket{instance="new:30000",model_name="m",is_streaming="false",le="5"}', values: '0+0x15'}
      - {series: 'sglang:time_to_first_token_seconds_bucket{instance="new:30000",model_name="m",is_streaming="false",le="+Inf"}', values: '0+500x15'}
`
	test := "rule_files: []\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:" + series + "    promql_expr_test:\n" + cases.String()
	path := filepath.Join(t.TempDir(), "serving_test.yml")
	if err := os.WriteFile(path, []byte(test), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := run(t, "promtool", "test", "rules", path); !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool:\n%s", out)
	}
}
