// Package deploy holds what runs beside autocapture: Prometheus alert rules for
// vLLM and SGLang (prometheus/vllm-alerts.yml, sglang-alerts.yml, with promtool
// unit tests), an Alertmanager
// route and receiver (alertmanager/), and for autocapture itself the image's
// config (docker/), alert rules (prometheus/autocapture-alerts.yml) and a
// Grafana dashboard (grafana/); a Compose topology (compose/) and a Kustomize
// base with a vLLM sidecar component (kubernetes/). Its tests also check the
// top-level Dockerfile and .dockerignore, that the self-monitoring files name
// only metrics a running daemon exports, that the Compose file and the
// manifests load strictly and agree with the configs they carry, and start
// the Compose topology from local binaries on loopback. AlertRules and SGLangAlertRules give tests and demos the rules
// with shorter windows, so an alert fires within seconds against vllmsim.
package deploy

import (
	_ "embed"
	"fmt"
	"regexp"
	"time"

	"github.com/prometheus/common/model"
)

// VLLMAlertRules is deploy/prometheus/vllm-alerts.yml as shipped.
//
//go:embed prometheus/vllm-alerts.yml
var VLLMAlertRules []byte

// SGLangRules is deploy/prometheus/sglang-alerts.yml as shipped: the same
// alert family as VLLMAlertRules (SGLangHighTTFT, SGLangHighITL,
// SGLangQueueDeep, SGLangKVCachePressure, SGLangHighAbortRatio).
//
//go:embed prometheus/sglang-alerts.yml
var SGLangRules []byte

// Shipped window and hold of every rule in vllm-alerts.yml and sglang-alerts.yml.
const (
	DefaultWindow = 5 * time.Minute
	DefaultFor    = 2 * time.Minute
)

var (
	windowRE = regexp.MustCompile(`\[5m\]\)`) // a range closing a rate(), not the comments
	forRE    = regexp.MustCompile(`(?m)^(\s+for: )\S+$`)
)

// AlertRules returns vllm-alerts.yml with every rate window ([5m]) set to window
// and every `for:` set to hold: the documented way to shorten the rules for tests
// (e.g. AlertRules(30*time.Second, 5*time.Second)). Zero keeps the shipped value.
// A window should span at least two scrapes, or rate() has nothing to work on.
func AlertRules(window, hold time.Duration) ([]byte, error) {
	return shorten(VLLMAlertRules, window, hold)
}

// SGLangAlertRules returns sglang-alerts.yml shortened as AlertRules does
// vllm-alerts.yml.
func SGLangAlertRules(window, hold time.Duration) ([]byte, error) {
	return shorten(SGLangRules, window, hold)
}

// shorten sets every rate window and every `for:` of rules.
func shorten(rules []byte, window, hold time.Duration) ([]byte, error) {
	if window < 0 || hold < 0 {
		return nil, fmt.Errorf("deploy: alert rules: negative window %s or for %s", window, hold)
	}
	out := rules
	if window > 0 {
		out = windowRE.ReplaceAll(out, []byte("["+model.Duration(window).String()+"])"))
	}
	if hold > 0 {
		out = forRE.ReplaceAll(out, []byte("${1}"+model.Duration(hold).String()))
	}
	return out, nil
}
