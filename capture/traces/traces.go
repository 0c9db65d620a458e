package traces

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/autocapture/autocapture/capture/internal/stepkit"
	"github.com/autocapture/autocapture/vocab"
)

// Config is the config of a `traces` step: the slowest llm_request spans of
// the alert's window, ranked by the stage the alert is about.
type Config struct {
	// Limit is how many of the slowest spans to report (default 10).
	Limit int `yaml:"limit" json:"limit,omitempty"`
	// RankBy is ttft, queue, prefill, decode or e2e. Default from the alertname:
	// a TTFT alert ranks by ttft, ITL by decode, a queue alert by queue, else e2e.
	RankBy string `yaml:"rank_by" json:"rank_by,omitempty"`
	// MinDuration skips spans shorter than this (the backend filters).
	MinDuration time.Duration `yaml:"min_duration" json:"min_duration,omitempty"`
	// Fetch is how many spans to ask the backend for per search (default 200).
	// While an answer comes back full, the search is repeated with a higher
	// minimum duration until the top Limit is certain.
	Fetch int `yaml:"fetch" json:"fetch,omitempty"`
	// Engine is the serving engine whose request spans are ranked: vllm
	// (default; llm_request spans of traces.service) or sglang (the "Req …"
	// root spans of service "sglang", which SGLang sets itself).
	Engine string `yaml:"engine" json:"engine,omitempty" jsonschema:"enum=vllm,enum=sglang"`
	// Exemplars also looks up trace ids in Prometheus exemplars of the ranked
	// histogram when Prometheus is configured (default true; vLLM attaches none,
	// pipelines that add them help here).
	Exemplars *bool `yaml:"exemplars" json:"exemplars,omitempty"`
	// Match keeps only spans whose span or resource attributes equal these values
	// (templated), so a fleet sharing one service.name yields the alerting
	// instance's requests: e.g. service.instance.id: '{{ .Labels.instance }}'
	// with OTEL_RESOURCE_ATTRIBUTES=service.instance.id=<host:port> on each server.
	// When no span of the window carries a key at all, the step ranks across the
	// whole service and says so in its summary, rather than returning nothing.
	Match map[string]string `yaml:"match" json:"match,omitempty"`
}

// Rank names: what "slowest" is measured by.
const (
	RankTTFT    = "ttft"
	RankQueue   = "queue"
	RankPrefill = "prefill"
	RankDecode  = "decode"
	RankE2E     = "e2e"
)

// maxSearches bounds the searches one step makes while narrowing a full answer.
const maxSearches = 48

// Traces is the `traces` step kind.
type Traces struct {
	cfg  Config
	kind spanKind // the engine's request spans
}

var _ vocab.Step = (*Traces)(nil)

// Kind is the traces step kind; capture's registry takes it.
var Kind = vocab.Kind{
	Name:   "traces",
	Tier:   vocab.TierTraces,
	Doc:    "The slowest request spans of the alert's window from Jaeger or Tempo (vLLM's llm_request, or SGLang's Req spans), ranked by TTFT, queue, prefill, decode or e2e time.",
	Config: func() any { return &Config{} },
	Build:  buildTraces,
}

func buildTraces(c any) (vocab.Step, error) {
	cfg, ok := c.(*Config)
	if !ok {
		return nil, fmt.Errorf("traces: config is %T, want *Config", c)
	}
	out := *cfg
	if out.Limit == 0 {
		out.Limit = 10
	}
	if out.Fetch == 0 {
		out.Fetch = 200
	}
	switch {
	case out.Limit < 0 || out.Fetch < 0 || out.MinDuration < 0:
		return nil, fmt.Errorf("traces: limit, fetch and min_duration must not be negative")
	case out.Fetch < out.Limit:
		return nil, fmt.Errorf("traces: fetch %d is below limit %d", out.Fetch, out.Limit)
	case out.RankBy != "" && spanRankValue(out.RankBy) == nil:
		return nil, fmt.Errorf("traces: rank_by %q: want ttft, queue, prefill, decode or e2e", out.RankBy)
	}
	k, ok := kindOf(out.Engine)
	if !ok {
		return nil, fmt.Errorf("traces: engine %q: want vllm or sglang", out.Engine)
	}
	return &Traces{cfg: out, kind: k}, nil
}

// rankFor is the configured rank, or the one the alert's name suggests.
func (t *Traces) rankFor(alertname string) string {
	if t.cfg.RankBy != "" {
		return t.cfg.RankBy
	}
	n := strings.ToLower(alertname)
	switch {
	case strings.Contains(n, "ttft") || strings.Contains(n, "firsttoken"):
		return RankTTFT
	case strings.Contains(n, "itl") || strings.Contains(n, "intertoken") || strings.Contains(n, "decode"):
		return RankDecode
	case strings.Contains(n, "queue"):
		return RankQueue
	case strings.Contains(n, "prefill"):
		return RankPrefill
	}
	return RankE2E
}

// Span is one llm_request span, its vLLM attributes read into numbers (seconds).
type Span struct {
	TraceID      string    `json:"trace_id"`
	SpanID       string    `json:"span_id"`
	Name         string    `json:"name"`
	Start        time.Time `json:"start"`
	DurationSec  float64   `json:"duration"`
	RequestID    string    `json:"request_id,omitempty"`
	TTFT         float64   `json:"ttft"`
	Queue        float64   `json:"queue"`
	Prefill      float64   `json:"prefill"`
	Decode       float64   `json:"decode"`
	E2E          float64   `json:"e2e"`
	PromptTokens int64     `json:"prompt_tokens"`
	OutputTokens int64     `json:"output_tokens"`
	// has records which latency attributes the span carried.
	has map[string]bool
	// attrs are the span's and its resource's attributes as text, for Match.
	attrs map[string]string
}

// matches says whether the span carries every key of match with its value.
func (s Span) matches(match map[string]string) bool {
	for k, v := range match {
		if got, ok := s.attrs[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// spanRankValue returns how a span is measured for rank, or nil for an unknown rank.
// A span without the attribute measures NaN and is never ranked.
func spanRankValue(rank string) func(Span) float64 {
	pick := func(key string, v func(Span) float64) func(Span) float64 {
		return func(s Span) float64 {
			if !s.has[key] {
				return math.NaN()
			}
			return v(s)
		}
	}
	switch rank {
	case RankTTFT:
		return pick(RankTTFT, func(s Span) float64 { return s.TTFT })
	case RankQueue:
		return pick(RankQueue, func(s Span) float64 { return s.Queue })
	case RankPrefill:
		return pick(RankPrefill, func(s Span) float64 { return s.Prefill })
	case RankDecode:
		return pick(RankDecode, func(s Span) float64 { return s.Decode })
	case RankE2E:
		return func(s Span) float64 {
			if s.has[RankE2E] {
				return s.E2E
			}
			return s.DurationSec
		}
	}
	return nil
}

// SpanQuery is one search of the trace backend.
type SpanQuery struct {
	Service     string
	Operation   string
	Start, End  time.Time
	MinDuration time.Duration
	Limit       int
	// Match, when set, keeps spans whose span or resource attributes equal these
	// values; backends that can filter server-side (Tempo) do, every answer is
	// also filtered client-side.
	Match map[string]string
	// Kind decides, with Operation, which span names an answer keeps.
	Kind spanKind
}

// wants says whether a span of this name answers q: its exact Operation, or
// a name its Kind's pattern matches.
func (q SpanQuery) wants(name string) bool {
	if q.Kind.re != nil {
		return q.Kind.re.MatchString(name)
	}
	return q.Operation == "" || name == q.Operation
}

// traceBackend is a trace store that can be searched for spans.
type traceBackend interface {
	// Search returns spans matching q, in the backend's own order, at most about
	// q.Limit traces' worth.
	Search(ctx context.Context, q SpanQuery) ([]Span, error)
	// Get returns the spans of one trace (for exemplars); unsupported backends
	// return an error.
	Get(ctx context.Context, traceID string) ([]Span, error)
	// Link is where a person opens the trace.
	Link(traceID string) string
	// Granularity is the shortest time range a search can tell apart.
	Granularity() time.Duration
}

// newTraceBackend picks the backend configured in env.
func newTraceBackend(env *vocab.Env) (traceBackend, string, error) {
	if env == nil || env.Traces == nil || env.Traces.URL == "" {
		return nil, "", vocab.NotConfigured("no trace backend (set traces.url to Jaeger or Tempo)")
	}
	tr := env.Traces
	switch tr.Backend {
	case "", "jaeger":
		return newJaeger(tr), tr.Service, nil
	case "tempo":
		return newTempo(tr), tr.Service, nil
	}
	return nil, "", vocab.Errorf(vocab.ReasonBadConfig, "traces: backend %q: want jaeger or tempo", tr.Backend)
}

// Run searches the window, raising the minimum duration while answers come back
// full, adds exemplar traces, and reports the top spans by rank.
func (t *Traces) Run(ctx context.Context, in *vocab.Input) (*vocab.Result, error) {
	be, service, err := newTraceBackend(in.Env)
	if err != nil {
		return nil, err
	}
	rank := t.rankFor(in.Alert.Labels["alertname"])
	value := spanRankValue(rank)
	if t.kind.service != "" {
		service = t.kind.service
	}
	q := SpanQuery{Service: service, Operation: t.kind.operation, Start: in.Window.Start, End: in.Window.End,
		MinDuration: t.cfg.MinDuration, Limit: t.cfg.Fetch, Match: t.cfg.Match, Kind: t.kind}
	set := spanSet{}
	rounds, complete, err := t.searchAll(ctx, be, q, value, set)
	if err != nil {
		return nil, &vocab.Error{Reason: vocab.Classify(err), Err: fmt.Errorf("traces: search %s: %w", service, err)}
	}
	matchNote := ""
	if len(q.Match) > 0 && len(set) == 0 {
		// Nothing matched: either the instance served nothing slow in the window,
		// or its spans do not carry the keys at all (no OTEL_RESOURCE_ATTRIBUTES).
		// Only the second falls back to the service-wide ranking.
		carried, err := anyCarries(ctx, be, q)
		if err != nil {
			return nil, &vocab.Error{Reason: vocab.Classify(err), Err: fmt.Errorf("traces: search %s: %w", service, err)}
		}
		if !carried {
			matchNote = fmt.Sprintf("no span carries %s: ranked across service %s (set OTEL_RESOURCE_ATTRIBUTES on the servers to narrow to one instance)", matchKeys(q.Match), service)
			q.Match = nil
			more, c, err := t.searchAll(ctx, be, q, value, set)
			if err != nil {
				return nil, &vocab.Error{Reason: vocab.Classify(err), Err: fmt.Errorf("traces: search %s: %w", service, err)}
			}
			rounds, complete = rounds+more, c
		}
	}
	exemplars := 0
	if t.cfg.Exemplars == nil || *t.cfg.Exemplars {
		exemplars = addExemplarTraces(ctx, in, be, t.kind, rank, t.cfg.Limit, set)
	}
	ranked := set.ranked(value)
	top := ranked[:min(t.cfg.Limit, len(ranked))]
	f := map[string]any{
		"searched": len(set), "returned": len(top), "rank_by": rank, "searches": rounds,
		"complete": complete, "exemplars": exemplars,
	}
	if len(t.cfg.Match) > 0 {
		f["match"] = t.cfg.Match
		f["match_applied"] = matchNote == ""
	}
	res, err := t.result(ctx, in, be, rank, ranked, top, f)
	if err == nil && len(top) == 0 {
		// The usual cause: vLLM exports as unknown_service unless
		// OTEL_SERVICE_NAME is set; SGLang only with --enable-trace.
		res.Summary = fmt.Sprintf("no %s spans of service %q with %s in the window (%s)", t.kind.label, service, rank, t.kind.none)
	}
	if err == nil && matchNote != "" {
		res.Summary += "; " + matchNote
	}
	return res, err
}

// anyCarries asks once, without the match, whether any span of the window
// carries every key of q.Match.
func anyCarries(ctx context.Context, be traceBackend, q SpanQuery) (bool, error) {
	probe := q
	probe.Match = nil
	spans, err := be.Search(ctx, probe)
	if err != nil {
		return false, err
	}
	for _, s := range spans {
		carries := true
		for k := range q.Match {
			if _, ok := s.attrs[k]; !ok {
				carries = false
				break
			}
		}
		if carries {
			return true, nil
		}
	}
	return false, nil
}

func matchKeys(m map[string]string) string { return strings.Join(sortedKeys(m), ", ") }

// searchAll finds every span that could be among the top Limit although the
// backend answers at most q.Limit traces per search, in its own order (Jaeger's
// memory store: the most recent). A full answer is narrowed two ways: every
// stage lies inside the span, so a span that could beat the current Limit-th
// value lasts at least that long (the minimum duration rises); when that does
// not help, the time range is split in halves. complete says every range came
// back short of full, so the ranking is exact.
func (t *Traces) searchAll(ctx context.Context, be traceBackend, q SpanQuery, value func(Span) float64, set spanSet) (int, bool, error) {
	type timeRange struct{ start, end time.Time }
	todo := []timeRange{{q.Start, q.End}}
	floor := q.MinDuration
	searches, complete := 0, true
	for len(todo) > 0 {
		if searches == maxSearches {
			return searches, false, nil
		}
		r := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		q.Start, q.End, q.MinDuration = r.start, r.end, floor
		spans, err := be.Search(ctx, q)
		searches++
		if err != nil {
			return searches, false, err
		}
		set.add(spans, q.Match)
		if len(spans) < q.Limit {
			continue
		}
		if v, ok := set.nth(value, t.cfg.Limit); ok {
			if next := time.Duration(v*float64(time.Second)*0.999) - time.Millisecond; next > floor {
				floor = next
				todo = append(todo, r)
				continue
			}
		}
		half := r.end.Sub(r.start) / 2
		if half < be.Granularity() {
			complete = false
			continue
		}
		mid := r.start.Add(half)
		todo = append(todo, timeRange{r.start, mid}, timeRange{mid, r.end})
	}
	return searches, complete, nil
}

// result stores the ranked spans and builds the findings.
func (t *Traces) result(ctx context.Context, in *vocab.Input, be traceBackend, rank string, ranked, top []Span, f map[string]any) (*vocab.Result, error) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(ranked); err != nil {
		return nil, vocab.Errorf(vocab.ReasonInternal, "traces: encode spans: %w", err)
	}
	art, err := stepkit.PutArtifact(ctx, in, "spans.json", "application/json", &buf)
	if err != nil {
		return nil, err
	}
	slowest := make([]any, 0, len(top))
	for _, s := range top {
		slowest = append(slowest, map[string]any{
			"trace_id": s.TraceID, "request_id": s.RequestID, "ttft": s.TTFT, "queue": s.Queue,
			"prefill": s.Prefill, "decode": s.Decode, "e2e": s.E2E, "prompt_tokens": s.PromptTokens,
			"output_tokens": s.OutputTokens, "link": be.Link(s.TraceID),
		})
	}
	f["slowest"] = slowest
	summary := fmt.Sprintf("no %s spans with %s in the window", t.kind.label, rank)
	if len(top) > 0 {
		v := spanRankValue(rank)
		s := top[0]
		summary = fmt.Sprintf("slowest %d of %d %s spans by %s: %.2fs..%.2fs; worst %s (queue %.2fs, prefill %.2fs, decode %.2fs)",
			len(top), len(ranked), t.kind.label, rank, v(s), v(top[len(top)-1]), shortID(s.TraceID), s.Queue, s.Prefill, s.Decode)
	}
	return &vocab.Result{Summary: summary, Findings: f, Artifacts: []vocab.Artifact{art}}, nil
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// spanSet holds spans by trace and span id, so repeated searches merge.
type spanSet map[string]Span

// add keeps the spans whose attributes equal every value of match.
func (s spanSet) add(spans []Span, match map[string]string) {
	for _, sp := range spans {
		if sp.matches(match) {
			s[sp.TraceID+"/"+sp.SpanID] = sp
		}
	}
}

// ranked returns the spans that carry the rank's value, slowest first (ties by
// trace id, so the order is stable).
func (s spanSet) ranked(value func(Span) float64) []Span {
	out := make([]Span, 0, len(s))
	for _, sp := range s {
		if !math.IsNaN(value(sp)) {
			out = append(out, sp)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		vi, vj := value(out[i]), value(out[j])
		if vi != vj {
			return vi > vj
		}
		return out[i].TraceID < out[j].TraceID
	})
	return out
}

// nth is the n-th largest rank value, when at least n spans carry one.
func (s spanSet) nth(value func(Span) float64, n int) (float64, bool) {
	r := s.ranked(value)
	if n <= 0 || len(r) < n {
		return 0, false
	}
	return value(r[n-1]), true
}
