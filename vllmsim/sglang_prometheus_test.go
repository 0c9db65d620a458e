package vllmsim_test

import (
	"context"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/vllmsim"
)

// TestPrometheusSelectsSGLangSeries: a real Prometheus scraping three SGLang
// sims in real time (overload, kv-pressure, client-aborts) answers the
// selectors the SGLang alert rules are written with: the sglang: names,
// model_name, le as Python prints it ("1.0", "0.0"), stage and mode, and
// each cause shows on its own instance only.
func TestPrometheusSelectsSGLangSeries(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var targets []string
	for i, sc := range []string{vllmsim.ScenarioOverload, vllmsim.ScenarioKVPressure, vllmsim.ScenarioClientAborts} {
		ls := startLive(t, ctx, vllmsim.Options{Engine: vllmsim.EngineSGLang, Scenario: sc, Model: "sglang-" + sc, Seed: uint64(20 + i)})
		targets = append(targets, ls.target)
	}
	prom := testenv.StartPrometheus(t, testenv.PrometheusOptions{ScrapeTargets: targets})
	for _, tg := range targets {
		prom.WaitUp(t, tg, 15*time.Second)
	}
	one := func(model string) func([]testenv.Sample) bool {
		return func(s []testenv.Sample) bool { return len(s) == 1 && s[0].Labels["model_name"] == model }
	}
	all := func(s []testenv.Sample) bool { return len(s) == 3 }
	want := map[string]func([]testenv.Sample) bool{
		`max by (model_name, instance) (max_over_time(sglang:num_queue_reqs[1m])) > 10`:                                                        one("sglang-overload"),
		`max by (model_name, instance) (max_over_time(sglang:token_usage[1m])) > 0.95`:                                                         one("sglang-kv-pressure"),
		`sum by (model_name, instance) (sglang:num_retracted_requests_total) > 0`:                                                              one("sglang-kv-pressure"),
		`sum by (model_name, instance) (sglang:num_aborted_requests_total) / sum by (model_name, instance) (sglang:num_requests_total) > 0.05`: one("sglang-client-aborts"),
		`sum by (model_name, instance) (sglang:time_to_first_token_seconds_bucket{le="1.0",is_streaming="true"})`:                              all,
		`sum by (model_name, instance) (sglang:inter_token_latency_seconds_bucket{le="+Inf"})`:                                                 all,
		`sum by (model_name, instance) (sglang:queue_time_seconds_bucket{le="0.0"})`:                                                           all,
		`sum by (model_name, instance) (sglang:per_stage_req_latency_seconds_count{stage="prefill_forward"})`:                                  all,
		`sum by (model_name, instance) (sglang:realtime_tokens_total{mode="prefill_compute"})`:                                                 all,
		`sum by (model_name, instance) (sglang:prompt_tokens_total)`:                                                                           all,
		`count({__name__=~"sglang:.+_bucket", le=~"[0-9]+"})`:                                                                                  func(s []testenv.Sample) bool { return len(s) == 0 },
	}
	awaitQueries(t, prom, want, 25*time.Second)
}
