package traces

import (
	"regexp"

	"github.com/autocapture/autocapture/vocab"
)

// spanKind is which spans a traces step ranks, per serving engine: vLLM's
// one llm_request span per request under the configured traces.service, or
// SGLang's request root span under the service name SGLang hard-codes
// (SGLANG.md §6, team notes). Both carry the gen_ai.latency.* attributes
// ranking reads.
type spanKind struct {
	// label names the spans in summaries.
	label string
	// service is the service.name searched; "" is the configured one.
	service string
	// operation is the exact span name, or "" when pattern decides.
	operation string
	// pattern matches span names: a TraceQL regex for Tempo, checked here
	// (anchored) on every answer.
	pattern string
	re      *regexp.Regexp
	// exemplars are the histograms whose exemplars point at slow requests.
	exemplars map[string]string
	// none says what finding no span means.
	none string
}

// sglangService is the service.name of SGLang's spans, set in its code, not
// by OTEL_SERVICE_NAME (SGLANG.md §6).
const sglangService = "sglang"

var kinds = map[string]spanKind{
	vocab.EngineVLLM: {label: "llm_request", operation: "llm_request", exemplars: exemplarMetric,
		none: "is traces.service the servers' OTEL_SERVICE_NAME?"},
	// The root span of a request is "{role} Req {rid[:8]}": role empty on a
	// unified server (a leading space), "prefill" or "decode" under PD.
	vocab.EngineSGLang: {label: "SGLang request (Req …)", service: sglangService,
		pattern: "(prefill |decode | )?Req [^ ]+",
		exemplars: map[string]string{
			RankTTFT:  "sglang:time_to_first_token_seconds_bucket",
			RankQueue: "sglang:queue_time_seconds_bucket",
			RankE2E:   "sglang:e2e_request_latency_seconds_bucket",
		},
		none: "SGLang exports request spans only when started with --enable-trace and --otlp-traces-endpoint (builds from 2025 on; older ones export none)"},
}

func init() {
	for name, k := range kinds {
		if k.pattern != "" {
			k.re = regexp.MustCompile("^(?:" + k.pattern + ")$")
			kinds[name] = k
		}
	}
}

// kindOf is the span kind of an engine ("" is vLLM); ok is false for an
// engine without one.
func kindOf(engine string) (spanKind, bool) {
	if engine == "" {
		engine = vocab.EngineVLLM
	}
	k, ok := kinds[engine]
	return k, ok
}

// wants says whether a span of this name is one the kind ranks.
func (k spanKind) wants(name string) bool {
	if k.re != nil {
		return k.re.MatchString(name)
	}
	return k.operation == "" || name == k.operation
}
