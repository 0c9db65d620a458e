package traces

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/autocapture/autocapture/capture/internal/stepkit"
	"github.com/autocapture/autocapture/vocab"
	"github.com/prometheus/common/model"
	"go.uber.org/zap"
)

// vLLM's span attributes (VLLM.md, tier 2), by what they measure.
const (
	attrTTFT         = "gen_ai.latency.time_to_first_token"
	attrE2E          = "gen_ai.latency.e2e"
	attrQueue        = "gen_ai.latency.time_in_queue"
	attrPrefill      = "gen_ai.latency.time_in_model_prefill"
	attrDecode       = "gen_ai.latency.time_in_model_decode"
	attrPromptTokens = "gen_ai.usage.prompt_tokens"
	attrOutputTokens = "gen_ai.usage.completion_tokens"
	attrRequestID    = "gen_ai.request.id"
)

// newSpan reads vLLM's attributes out of a span's attribute map.
func newSpan(traceID, spanID, name string, start time.Time, dur time.Duration, attrs map[string]any) Span {
	s := Span{TraceID: traceID, SpanID: spanID, Name: name, Start: start.UTC(), DurationSec: dur.Seconds(),
		has: map[string]bool{}, attrs: make(map[string]string, len(attrs))}
	for k, v := range attrs {
		if v != nil {
			s.attrs[k] = fmt.Sprint(v)
		}
	}
	for key, dst := range map[string]*float64{
		attrTTFT: &s.TTFT, attrE2E: &s.E2E, attrQueue: &s.Queue, attrPrefill: &s.Prefill, attrDecode: &s.Decode,
	} {
		if f, ok := number(attrs[key]); ok {
			*dst = f
			s.has[rankOfAttr[key]] = true
		}
	}
	if f, ok := number(attrs[attrPromptTokens]); ok {
		s.PromptTokens = int64(f)
	}
	if f, ok := number(attrs[attrOutputTokens]); ok {
		s.OutputTokens = int64(f)
	}
	if id, ok := attrs[attrRequestID].(string); ok {
		s.RequestID = id
	} else if id, ok := attrs["rid"].(string); ok { // SGLang's root span (SGLANG.md §6)
		s.RequestID = id
	}
	return s
}

var rankOfAttr = map[string]string{attrTTFT: RankTTFT, attrE2E: RankE2E, attrQueue: RankQueue,
	attrPrefill: RankPrefill, attrDecode: RankDecode}

// number reads a JSON number, an integer, or a numeric string.
func number(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case int64:
		return float64(x), true
	case int:
		return float64(x), true
	case string:
		f, err := strconv.ParseFloat(x, 64)
		return f, err == nil
	}
	return 0, false
}

// exemplarMetric is the vLLM histogram whose exemplars point at slow requests of
// each rank.
var exemplarMetric = map[string]string{
	RankTTFT:    "vllm:time_to_first_token_seconds_bucket",
	RankQueue:   "vllm:request_queue_time_seconds_bucket",
	RankPrefill: "vllm:request_prefill_time_seconds_bucket",
	RankDecode:  "vllm:request_decode_time_seconds_bucket",
	RankE2E:     "vllm:e2e_request_latency_seconds_bucket",
}

// exemplarTraceLabels are the label names pipelines put trace ids under.
var exemplarTraceLabels = []string{"trace_id", "traceID", "traceId"}

// addExemplarTraces asks Prometheus for exemplars of the rank's histogram in the
// window (the alert's instance only, when it has one), fetches the traces of the
// highest ones that the search missed, and returns how many exemplars it saw.
// Exemplars are a bonus: any failure is logged and ignored.
func addExemplarTraces(ctx context.Context, in *vocab.Input, be traceBackend, kind spanKind, rank string, limit int, set spanSet) int {
	sel := kind.exemplars[rank]
	if in.Env == nil || in.Env.Prometheus == nil || in.Env.Prometheus.URL == "" || sel == "" {
		return 0
	}
	log := stepkit.Logger(in)
	if inst := in.Alert.Labels["instance"]; inst != "" {
		sel += "{instance=" + strconv.Quote(inst) + "}"
	}
	papi, err := stepkit.PromAPIOf(in.Env.Prometheus)
	if err != nil {
		log.Warn("Could not build a Prometheus client for exemplars.", zap.Error(err))
		return 0
	}
	res, err := papi.QueryExemplars(ctx, sel, in.Window.Start, in.Window.End)
	if err != nil {
		log.Info("Prometheus exemplars unavailable; ranking from the trace search only.", zap.String("query", sel), zap.Error(err))
		return 0
	}
	type ex struct {
		id    string
		value float64
	}
	var all []ex
	for _, r := range res {
		for _, e := range r.Exemplars {
			for _, l := range exemplarTraceLabels {
				if id := string(e.Labels[model.LabelName(l)]); id != "" {
					all = append(all, ex{id: id, value: float64(e.Value)})
					break
				}
			}
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].value > all[j].value })
	known := map[string]bool{}
	for _, s := range set {
		known[s.TraceID] = true
	}
	for _, e := range all[:min(limit, len(all))] {
		if known[e.id] {
			continue
		}
		spans, err := be.Get(ctx, e.id)
		if err != nil {
			log.Info("Could not fetch an exemplar's trace.", zap.String("trace_id", e.id), zap.Error(err))
			continue
		}
		set.add(filterKind(spans, kind), nil) // exemplars come from the alerting instance's own histogram
		known[e.id] = true
	}
	return len(all)
}

// filterKind keeps the spans of a trace that the kind ranks.
func filterKind(spans []Span, kind spanKind) []Span {
	out := spans[:0:0]
	for _, s := range spans {
		if kind.wants(s.Name) {
			out = append(out, s)
		}
	}
	return out
}

// errNoGet is returned by backends that cannot fetch a trace by id.
var errNoGet = fmt.Errorf("fetching one trace by id is not supported by this backend")
