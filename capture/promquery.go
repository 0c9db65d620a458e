package capture

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/autocapture/autocapture/capture/internal/stepkit"
	"github.com/autocapture/autocapture/vocab"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"golang.org/x/sync/errgroup"
)

// vectorElem is one labelled number in a finding.
type vectorElem struct {
	Labels map[string]string `json:"labels"`
	Value  any               `json:"value"`
}

// seriesSummary is one series of a range result in a finding.
type seriesSummary struct {
	Labels map[string]string `json:"labels"`
	Points int               `json:"points"`
	Last   any               `json:"last"`
	Min    any               `json:"min"`
	Max    any               `json:"max"`
}

// queryFinding turns a result into what `when` expressions and the run JSON see:
// a scalar, or a vector with one unlabelled element (what `max(...)` returns),
// becomes a number; other vectors a list of {labels, value}; a matrix a list of
// per-series summaries. It also returns the number a `signal:` takes (the
// largest finite sample of an instant result) and whether there was any data.
func queryFinding(v model.Value) (finding any, signal float64, hasSignal, hasData bool) {
	signal = math.Inf(-1)
	take := func(x float64) {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			signal, hasSignal = math.Max(signal, x), true
		}
	}
	switch r := v.(type) {
	case *model.Scalar:
		take(float64(r.Value))
		return finite(float64(r.Value)), signal, hasSignal, true
	case model.Vector:
		if len(r) == 1 && len(r[0].Metric) == 0 {
			take(float64(r[0].Value))
			return finite(float64(r[0].Value)), signal, hasSignal, true
		}
		out := make([]vectorElem, 0, len(r))
		for _, s := range r {
			take(float64(s.Value))
			out = append(out, vectorElem{Labels: labelMap(s.Metric), Value: finite(float64(s.Value))})
		}
		return out, signal, hasSignal, len(r) > 0
	case model.Matrix:
		out := make([]seriesSummary, 0, len(r))
		for _, ss := range r {
			out = append(out, summarizeSeries(ss))
		}
		return out, 0, false, len(r) > 0
	}
	return nil, 0, false, false
}

// summarizeSeries reduces a range series to its last, min and max.
func summarizeSeries(ss *model.SampleStream) seriesSummary {
	out := seriesSummary{Labels: labelMap(ss.Metric), Points: len(ss.Values)}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, p := range ss.Values {
		x := float64(p.Value)
		if math.IsNaN(x) {
			continue
		}
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	if n := len(ss.Values); n > 0 {
		out.Last = finite(float64(ss.Values[n-1].Value))
	}
	out.Min, out.Max = finite(lo), finite(hi)
	return out
}

func labelMap(m model.Metric) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[string(k)] = string(v)
	}
	return out
}

// inputPromAPI is the configured Prometheus and its API, for a step of kind
// (named in the error when none is configured).
func inputPromAPI(in *vocab.Input, kind string) (*vocab.Endpoint, v1.API, error) {
	var ep *vocab.Endpoint
	if in.Env != nil {
		ep = in.Env.Prometheus
	}
	if ep == nil || ep.URL == "" {
		return nil, nil, vocab.NotConfigured("no Prometheus (set prometheus.url)")
	}
	papi, err := stepkit.PromAPIOf(ep)
	if err != nil {
		return nil, nil, err
	}
	return ep, papi, nil
}

// queryTimeoutOf bounds one query: the endpoint's timeout, else 10 s.
func queryTimeoutOf(e *vocab.Endpoint) time.Duration {
	if e.Timeout > 0 {
		return e.Timeout
	}
	return 10 * time.Second
}

// PromQL's range selectors ([2m], subqueries [2m:] and [2m:15s]), offsets and
// @ modifiers with a literal time, as promWindow reads them.
var (
	promRangeRE  = regexp.MustCompile(`\[\s*((?:\d+(?:ms|[smhdwy]))+)\s*(?::[^\]]*)?\]`)
	promOffsetRE = regexp.MustCompile(`\boffset\s+((?:\d+(?:ms|[smhdwy]))+)`)
	promAtRE     = regexp.MustCompile(`@\s*(\d+(?:\.\d+)?)`)
)

// promWindow reads how much data a query summarises (its longest range
// selector; 0 for a reading at one moment) and how far before end that data
// ends (its longest offset, or end minus an @ time). It is a reading for the
// on-call, not a parse: a query it cannot read gets 0, 0.
func promWindow(query string, end time.Time) (window, lag time.Duration) {
	for _, m := range promRangeRE.FindAllStringSubmatch(query, -1) {
		if d, err := model.ParseDuration(m[1]); err == nil {
			window = max(window, time.Duration(d))
		}
	}
	for _, m := range promOffsetRE.FindAllStringSubmatch(query, -1) {
		if d, err := model.ParseDuration(m[1]); err == nil {
			lag = max(lag, time.Duration(d))
		}
	}
	for _, m := range promAtRE.FindAllStringSubmatch(query, -1) {
		if f, err := strconv.ParseFloat(m[1], 64); err == nil {
			at := time.Unix(0, int64(f*1e9))
			lag = max(lag, end.Sub(at))
		}
	}
	return window, lag
}

// promTarget is what a step querying Prometheus needs from its input: the
// endpoint, its API, the window's bounds and the per-query deadline.
type promTarget struct {
	ep         *vocab.Endpoint
	api        v1.API
	start, end time.Time
	timeout    time.Duration
}

// promTargetOf reads the configured Prometheus and the window from in: the
// window ends at its end (else now) and starts at its start (else an hour
// earlier); a query's deadline is the endpoint's timeout, else 10 s.
func promTargetOf(in *vocab.Input, kind string) (*promTarget, error) {
	ep, papi, err := inputPromAPI(in, kind)
	if err != nil {
		return nil, err
	}
	pt := &promTarget{ep: ep, api: papi, end: in.Window.End, start: in.Window.Start, timeout: queryTimeoutOf(ep)}
	if pt.end.IsZero() {
		pt.end = stepkit.EnvNow(in.Env)
	}
	if pt.start.IsZero() || !pt.start.Before(pt.end) {
		pt.start = pt.end.Add(-time.Hour)
	}
	return pt, nil
}

// runAll runs queries in parallel, at most maxParallelQueries in flight, each
// under its own deadline over pt's window; runQuery records a query's error
// in its outcome.
func (pt *promTarget) runAll(ctx context.Context, queries []PromQuery) []queryOutcome {
	outs := make([]queryOutcome, len(queries))
	var g errgroup.Group
	g.SetLimit(maxParallelQueries)
	for i, q := range queries {
		g.Go(func() error {
			outs[i] = runQuery(ctx, pt.api, q, pt.start, pt.end, pt.timeout)
			return nil
		})
	}
	_ = g.Wait()
	return outs
}

// queryFailures are the failed outcomes by name ("reason: error"; nil when
// none failed) and the first of them.
func queryFailures(outs []queryOutcome) (map[string]string, *queryOutcome) {
	var failed map[string]string
	var first *queryOutcome
	for i, o := range outs {
		if o.err == nil {
			continue
		}
		if failed == nil {
			failed, first = map[string]string{}, &outs[i]
		}
		failed[o.Name] = fmt.Sprintf("%s: %s", o.Reason, o.Error)
	}
	return failed, first
}

// allFailedErr is a step's error when every one of outs failed (what names
// the step and its Prometheus), else nil; first is queryFailures' first.
func allFailedErr(what string, outs []queryOutcome, failed map[string]string, first *queryOutcome) error {
	if first == nil || len(failed) < len(outs) {
		return nil
	}
	return &vocab.Error{Reason: first.Reason, Err: fmt.Errorf("%s: all %d queries failed; %s: %w", what, len(outs), first.Name, first.err)}
}

// failedNames lists failed queries for a summary: "name reason", sorted.
func failedNames(failed map[string]string) string {
	names := make([]string, 0, len(failed))
	for n, why := range failed {
		reason, _, _ := strings.Cut(why, ":")
		names = append(names, n+" "+reason)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}
