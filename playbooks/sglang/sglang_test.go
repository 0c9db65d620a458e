package sglang_test

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"
	"github.com/prometheus/prometheus/promql/parser"
	"go.uber.org/zap"

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
