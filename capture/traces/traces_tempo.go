package traces

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/autocapture/autocapture/capture/internal/stepkit"
	"github.com/autocapture/autocapture/vocab"
)

// tempo searches Grafana Tempo with TraceQL (GET /api/search). No Tempo runs in
// this project's tests: they use an httptest server answering Tempo's documented
// search JSON.
type tempo struct {
	base   string
	client *http.Client
}

func newTempo(tr *vocab.TracesEndpoint) *tempo {
	return &tempo{base: strings.TrimSuffix(tr.URL, "/"), client: stepkit.HTTPClientOf(&tr.Endpoint)}
}

// Link is the trace as Tempo serves it (Grafana's explore URL depends on the
// datasource's name, which the daemon does not know).
func (t *tempo) Link(traceID string) string { return t.base + "/api/traces/" + traceID }

// Get is not supported: exemplar trace ids only help when the search saw them.
func (t *tempo) Get(context.Context, string) ([]Span, error) { return nil, errNoGet }

// Granularity: Tempo's search takes whole seconds.
func (t *tempo) Granularity() time.Duration { return 2 * time.Second }

// tempoSelect lists the attributes Tempo must return with each matched span.
var tempoSelect = []string{attrTTFT, attrE2E, attrQueue, attrPrefill, attrDecode,
	attrPromptTokens, attrOutputTokens, attrRequestID}

// traceQL builds the search: the service's llm_request spans at least MinDuration
// long, selecting vLLM's attributes.
func traceQL(q SpanQuery) string {
	conds := []string{fmt.Sprintf("name = %s", strconv.Quote(q.Operation))}
	if q.Kind.pattern != "" {
		conds = []string{fmt.Sprintf("name =~ %s", strconv.Quote(q.Kind.pattern))}
	}
	if q.Service != "" {
		conds = append([]string{fmt.Sprintf("resource.service.name = %s", strconv.Quote(q.Service))}, conds...)
	}
	if q.MinDuration > 0 {
		conds = append(conds, fmt.Sprintf("duration >= %dms", q.MinDuration.Milliseconds()))
	}
	sel := make([]string, len(tempoSelect))
	for i, a := range tempoSelect {
		sel[i] = "span." + a
	}
	// An unscoped attribute (.key) matches a span's or its resource's; selecting
	// it returns the value so the client-side check sees it too.
	for _, k := range sortedKeys(q.Match) {
		conds = append(conds, fmt.Sprintf(".%s = %s", k, strconv.Quote(q.Match[k])))
		sel = append(sel, "."+k)
	}
	return fmt.Sprintf("{ %s } | select(%s)", strings.Join(conds, " && "), strings.Join(sel, ", "))
}

// Search asks /api/search for up to q.Limit traces in [Start, End].
func (t *tempo) Search(ctx context.Context, q SpanQuery) ([]Span, error) {
	v := url.Values{}
	v.Set("q", traceQL(q))
	v.Set("start", strconv.FormatInt(q.Start.Unix(), 10))
	v.Set("end", strconv.FormatInt(q.End.Unix()+1, 10))
	v.Set("limit", strconv.Itoa(q.Limit))
	v.Set("spss", "10")
	u := t.base + "/api/search?" + v.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, vocab.Errorf(vocab.ReasonBadConfig, "tempo %s: %w", t.base, err)
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return nil, &vocab.Error{Reason: vocab.Classify(err), Err: fmt.Errorf("tempo %s: %w", t.base, err)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxTraceAnswer))
	if err != nil {
		return nil, &vocab.Error{Reason: vocab.Classify(err), Err: fmt.Errorf("tempo %s: read answer: %w", t.base, err)}
	}
	if resp.StatusCode != http.StatusOK {
		return nil, stepkit.HTTPStatusError("tempo "+t.base+"/api/search", resp.StatusCode, string(body))
	}
	return parseTempoSearch(body, q)
}

// tempoSpanSet is one spanSet of a Tempo search answer.
type tempoSpanSet struct {
	Spans []struct {
		SpanID        string   `json:"spanID"`
		Name          string   `json:"name"`
		StartUnixNano string   `json:"startTimeUnixNano"`
		DurationNanos string   `json:"durationNanos"`
		Attributes    []otlpKV `json:"attributes"`
	} `json:"spans"`
}

// parseTempoSearch reads {"traces":[{traceID, spanSets:[{spans:[…]}]}]}; older
// Tempo answers carry one "spanSet" instead of "spanSets".
func parseTempoSearch(body []byte, q SpanQuery) ([]Span, error) {
	var ans struct {
		Traces []struct {
			TraceID  string         `json:"traceID"`
			SpanSet  *tempoSpanSet  `json:"spanSet"`
			SpanSets []tempoSpanSet `json:"spanSets"`
		} `json:"traces"`
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		return nil, vocab.Errorf(vocab.ReasonUpstream5xx, "tempo /api/search: decode: %w", err)
	}
	var out []Span
	for _, tr := range ans.Traces {
		sets := tr.SpanSets
		if len(sets) == 0 && tr.SpanSet != nil {
			sets = []tempoSpanSet{*tr.SpanSet}
		}
		seen := map[string]bool{}
		for _, set := range sets {
			for _, s := range set.Spans {
				if seen[s.SpanID] || (s.Name != "" && !q.wants(s.Name)) {
					continue
				}
				seen[s.SpanID] = true
				start, _ := strconv.ParseInt(s.StartUnixNano, 10, 64)
				dur, _ := strconv.ParseInt(s.DurationNanos, 10, 64)
				name := s.Name
				if name == "" {
					name = q.Operation // the query matched on it ("" for a pattern)
				}
				out = append(out, newSpan(tempoTraceID(tr.TraceID), s.SpanID, name, time.Unix(0, start),
					time.Duration(dur), otlpAttrs(s.Attributes)))
			}
		}
	}
	return out, nil
}

// tempoTraceID restores the leading zeros Tempo drops from hex trace ids.
func tempoTraceID(id string) string {
	id = strings.ToLower(id)
	if len(id) < 32 && strings.Trim(id, "0123456789abcdef") == "" {
		return strings.Repeat("0", 32-len(id)) + id
	}
	return otlpID(id)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
