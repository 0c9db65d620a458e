package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"sort"
	"time"

	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/vllmsim"
)

// demoRule is the shipped alert rule (deploy/prometheus/vllm-alerts.yml or
// sglang-alerts.yml) a simulated cause trips, with the rule's summary annotation.
type demoRule struct {
	alertname string
	summary   string // fmt: instance, model
}

// demoRules maps each engine's vllmsim scenarios that page to the rule they
// trip; the summaries are the rules' annotations with the labels filled in.
// healthy trips none: the demo refuses it.
var demoRules = map[string]map[string]demoRule{vllmsim.EngineVLLM: demoRulesVLLM, vllmsim.EngineSGLang: demoRulesSGLang}

var demoRulesVLLM = map[string]demoRule{
	vllmsim.ScenarioOverload:     {"VLLMQueueDeep", "more than 10 requests waiting on %s (%s)"},
	vllmsim.ScenarioKVPressure:   {"VLLMKVCachePressure", "KV cache above 95%% on %s (%s)"},
	vllmsim.ScenarioPrefillBound: {"VLLMHighTTFT", "p99 time to first token above 2s on %s (%s)"},
	vllmsim.ScenarioDecodeBound:  {"VLLMHighITL", "p99 inter-token latency above 200ms on %s (%s)"},
	vllmsim.ScenarioClientAborts: {"VLLMHighAbortRatio", "more than 5%% of requests aborted on %s (%s)"},
	vllmsim.ScenarioUnexplained:  {"VLLMHighITL", "p99 inter-token latency above 200ms on %s (%s)"},
}

var demoRulesSGLang = map[string]demoRule{
	vllmsim.ScenarioOverload:     {"SGLangQueueDeep", "more than 10 requests waiting on %s (%s, SGLang)"},
	vllmsim.ScenarioKVPressure:   {"SGLangKVCachePressure", "KV token pool above 95%% on %s (%s, SGLang)"},
	vllmsim.ScenarioPrefillBound: {"SGLangHighTTFT", "p99 time to first token above 2s on %s (%s, SGLang)"},
	vllmsim.ScenarioDecodeBound:  {"SGLangHighITL", "p99 inter-token latency above 200ms on %s (%s, SGLang)"},
	vllmsim.ScenarioClientAborts: {"SGLangHighAbortRatio", "more than 5%% of requests aborted on %s (%s, SGLang)"},
	vllmsim.ScenarioUnexplained:  {"SGLangHighITL", "p99 inter-token latency above 200ms on %s (%s, SGLang)"},
}

// demoScenarios are the scenarios the demo runs, sorted (the same for both engines).
func demoScenarios() []string {
	out := make([]string, 0, len(demoRulesVLLM))
	for s := range demoRulesVLLM {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// amWebhook is Alertmanager's webhook body (notify/webhook.Message, whose
// package would pull Alertmanager's notifier dependencies into the binary).
type amWebhook struct {
	*template.Data
	Version         string `json:"version"`
	GroupKey        string `json:"groupKey"`
	TruncatedAlerts uint64 `json:"truncatedAlerts"`
}

// demoWebhook is the Alertmanager v4 webhook body Alertmanager would send
// for the rule firing on instance since startsAt: one group of one alert,
// grouped by alertname and instance.
// job is the scrape job's name (the engine's).
func demoWebhook(rule demoRule, instance, model, job string, startsAt time.Time) ([]byte, error) {
	labels := template.KV{"alertname": rule.alertname, "instance": instance, "model_name": model,
		"severity": "page", "job": job}
	ann := template.KV{"summary": fmt.Sprintf(rule.summary, instance, model)}
	groupLabels := template.KV{"alertname": rule.alertname, "instance": instance}
	msg := amWebhook{
		Version:  "4",
		GroupKey: fmt.Sprintf(`{}:{alertname=%q, instance=%q}`, rule.alertname, instance),
		Data: &template.Data{
			Receiver:          "autocapture",
			Status:            "firing",
			GroupLabels:       groupLabels,
			CommonLabels:      labels,
			CommonAnnotations: ann,
			ExternalURL:       "http://alertmanager.demo.invalid:9093",
			Alerts: template.Alerts{{
				Status:       "firing",
				Labels:       labels,
				Annotations:  ann,
				StartsAt:     startsAt.UTC(),
				GeneratorURL: "http://prometheus.demo.invalid:9090/graph?g0.expr=" + rule.alertname,
				Fingerprint:  fmt.Sprintf("%016x", fnv64(rule.alertname+"/"+instance)),
			}},
		},
	}
	return json.Marshal(msg)
}

// fnv64 is a stand-in for Alertmanager's label-set fingerprint (also FNV-1a).
func fnv64(s string) uint64 {
	h := fnv.New64a()
	_, _ = io.WriteString(h, s)
	return h.Sum64()
}

// postWebhook sends body to the daemon's Alertmanager receiver.
func postWebhook(ctx context.Context, daemonURL string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, daemonURL+"/hooks/alertmanager", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("post the alert: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("post the alert: %s: %s", resp.Status, bytes.TrimSpace(b))
	}
	return nil
}
