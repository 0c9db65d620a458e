// Package promkit is the query runner that capture's Prometheus families
// share (prometheus, peers, gpu): the configured Prometheus and the window, one
// query under its own deadline, many in parallel, the outcomes' failures, a
// result as a finding, and the JSON artifact.
package promkit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/autocapture/autocapture/capture/internal/stepkit"
	"github.com/autocapture/autocapture/internal/clip"
	"github.com/autocapture/autocapture/vocab"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"golang.org/x/sync/errgroup"
)

// VectorElem is one labelled number in a finding.
type VectorElem struct {
	Labels map[string]string `json:"labels"`
	Value  any               `json:"value"`
}

// SeriesSummary is one series of a range result in a finding.
type SeriesSummary struct {
	Labels map[string]string `json:"labels"`
	Points int               `json:"points"`
	Last   any               `json:"last"`
	Min    any               `json:"min"`
	Max    any               `json:"max"`
}

// QueryFinding turns a result into what `when` expressions and the run JSON see:
// a scalar, or a vector with one unlabelled element (what `max(...)` returns),
// becomes a number; other vectors a list of {labels, value}; a matrix a list of
// per-series summaries. It also returns the number a `signal:` takes (the
// largest finite sample of an instant result) and whether there was any data.
func QueryFinding(v model.Value) (finding any, signal float64, hasSignal, hasData bool) {
	signal = math.Inf(-1)
	take := func(x float64) {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			signal, hasSignal = math.Max(signal, x), true
		}
	}
	switch r := v.(type) {
	case *model.Scalar:
		take(float64(r.Value))
		return Finite(float64(r.Value)), signal, hasSignal, true
	case model.Vector:
		if len(r) == 1 && len(r[0].Metric) == 0 {
			take(float64(r[0].Value))
			return Finite(float64(r[0].Value)), signal, hasSignal, true
		}
		out := make([]VectorElem, 0, len(r))
		for _, s := range r {
			take(float64(s.Value))
			out = append(out, VectorElem{Labels: labelMap(s.Metric), Value: Finite(float64(s.Value))})
		}
		return out, signal, hasSignal, len(r) > 0
	case model.Matrix:
		out := make([]SeriesSummary, 0, len(r))
		for _, ss := range r {
			out = append(out, summarizeSeries(ss))
		}
		return out, 0, false, len(r) > 0
	}
	return nil, 0, false, false
}

// summarizeSeries reduces a range series to its last, min and max.
func summarizeSeries(ss *model.SampleStream) SeriesSummary {
	out := SeriesSummary{Labels: labelMap(ss.Metric), Points: len(ss.Values)}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, p := range ss.Values {
		x := float64(p.Value)
		if math.IsNaN(x) {
			continue
		}
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	if n := len(ss.Values); n > 0 {
		out.Last = Finite(float64(ss.Values[n-1].Value))
	}
	out.Min, out.Max = Finite(lo), Finite(hi)
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
// @ modifiers with a literal time, as Window reads them.
var (
	promRangeRE  = regexp.MustCompile(`\[\s*((?:\d+(?:ms|[smhdwy]))+)\s*(?::[^\]]*)?\]`)
	promOffsetRE = regexp.MustCompile(`\boffset\s+((?:\d+(?:ms|[smhdwy]))+)`)
	promAtRE     = regexp.MustCompile(`@\s*(\d+(?:\.\d+)?)`)
)

// Window reads how much data a query summarises (its longest range
// selector; 0 for a reading at one moment) and how far before end that data
// ends (its longest offset, or end minus an @ time). It is a reading for the
// on-call, not a parse: a query it cannot read gets 0, 0.
func Window(query string, end time.Time) (window, lag time.Duration) {
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

// Target is what a step querying Prometheus needs from its input: the
// endpoint, its API, the window's bounds and the per-query deadline.
type Target struct {
	Ep         *vocab.Endpoint
	API        v1.API
	Start, End time.Time
	Timeout    time.Duration
}

// TargetOf reads the configured Prometheus and the window from in: the
// window ends at its end (else now) and starts at its start (else an hour
// earlier); a query's deadline is the endpoint's timeout, else 10 s.
func TargetOf(in *vocab.Input, kind string) (*Target, error) {
	ep, papi, err := inputPromAPI(in, kind)
	if err != nil {
		return nil, err
	}
	pt := &Target{Ep: ep, API: papi, End: in.Window.End, Start: in.Window.Start, Timeout: queryTimeoutOf(ep)}
	if pt.End.IsZero() {
		pt.End = stepkit.EnvNow(in.Env)
	}
	if pt.Start.IsZero() || !pt.Start.Before(pt.End) {
		pt.Start = pt.End.Add(-time.Hour)
	}
	return pt, nil
}

// RunAll runs queries in parallel, at most MaxParallelQueries in flight, each
// under its own deadline over pt's window; RunQuery records a query's error
// in its outcome.
func (pt *Target) RunAll(ctx context.Context, queries []PromQuery) []QueryOutcome {
	outs := make([]QueryOutcome, len(queries))
	var g errgroup.Group
	g.SetLimit(MaxParallelQueries)
	for i, q := range queries {
		g.Go(func() error {
			outs[i] = RunQuery(ctx, pt.API, q, pt.Start, pt.End, pt.Timeout)
			return nil
		})
	}
	_ = g.Wait()
	return outs
}

// Failures are the failed outcomes by name ("reason: error"; nil when
// none failed) and the first of them.
func Failures(outs []QueryOutcome) (map[string]string, *QueryOutcome) {
	var failed map[string]string
	var first *QueryOutcome
	for i, o := range outs {
		if o.Err == nil {
			continue
		}
		if failed == nil {
			failed, first = map[string]string{}, &outs[i]
		}
		failed[o.Name] = fmt.Sprintf("%s: %s", o.Reason, o.Error)
	}
	return failed, first
}

// AllFailedErr is a step's error when every one of outs failed (what names
// the step and its Prometheus), else nil; first is Failures' first.
func AllFailedErr(what string, outs []QueryOutcome, failed map[string]string, first *QueryOutcome) error {
	if first == nil || len(failed) < len(outs) {
		return nil
	}
	return &vocab.Error{Reason: first.Reason, Err: fmt.Errorf("%s: all %d queries failed; %s: %w", what, len(outs), first.Name, first.Err)}
}

// FailedNames lists failed queries for a summary: "name reason", sorted.
func FailedNames(failed map[string]string) string {
	names := make([]string, 0, len(failed))
	for n, why := range failed {
		reason, _, _ := strings.Cut(why, ":")
		names = append(names, n+" "+reason)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// PromQuery is one PromQL query. Templates are rendered before it gets here:
// label values reach PromQL through `promQuote`.
type PromQuery struct {
	// Name keys the finding (steps.<id>.<name>): letters, digits and '_'.
	Name string `yaml:"name" json:"name"`
	// Query is the PromQL expression.
	Query string `yaml:"query" json:"query"`
	// Signal, for an instant query, maps its result to a canonical signal
	// (vocab/signals.go); a vector gives its largest sample.
	Signal string `yaml:"signal,omitempty" json:"signal,omitempty"`
	// Range runs the query over the alert's window instead of at its end.
	Range bool `yaml:"range,omitempty" json:"range,omitempty"`
	// Step is a range query's resolution; default: whole seconds, at most 250 points.
	Step time.Duration `yaml:"step,omitempty" json:"step,omitempty"`
	// Timeout bounds this query; default the Prometheus endpoint's timeout, else 10s.
	Timeout time.Duration `yaml:"timeout,omitempty" json:"timeout,omitempty"`
	// Baseline also reads the signal over the instance's own past (the
	// step's baseline windows), in one more query: the signals
	// <signal>_baseline and <signal>_baseline_1d, for triage to compare with.
	Baseline bool `yaml:"baseline,omitempty" json:"baseline,omitempty"`

	// BaselineOf is set on the derived query that reads this signal's
	// baselines; it is no part of a playbook's config.
	BaselineOf string `yaml:"-" json:"-"`
}

// MaxParallelQueries bounds the queries one step has in flight.
const MaxParallelQueries = 16

// QueryOutcome is one query's record in the JSON artifact.
type QueryOutcome struct {
	Name       string       `json:"name"`
	Query      string       `json:"query"`
	Type       string       `json:"type"` // instant | range
	Time       time.Time    `json:"time,omitzero"`
	Start      time.Time    `json:"start,omitzero"`
	End        time.Time    `json:"end,omitzero"`
	Step       string       `json:"step,omitempty"`
	ResultType string       `json:"result_type,omitempty"`
	Result     model.Value  `json:"result,omitempty"`
	Warnings   []string     `json:"warnings,omitempty"`
	Error      string       `json:"error,omitempty"`
	Reason     vocab.Reason `json:"reason,omitempty"`
	Duration   float64      `json:"duration_s"`
	Err        error        `json:"-"`
}

// RunQuery runs one query under its own deadline.
func RunQuery(ctx context.Context, papi v1.API, q PromQuery, start, end time.Time, timeout time.Duration) QueryOutcome {
	if q.Timeout > 0 {
		timeout = q.Timeout
	}
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("query %s: no answer within %v", q.Name, timeout))
	defer cancel()
	o := QueryOutcome{Name: q.Name, Query: q.Query}
	t0 := time.Now()
	var warnings v1.Warnings
	var err error
	if q.Range {
		step := q.Step
		if step == 0 {
			step = stepkit.RangeStep(start, end)
		}
		o.Type, o.Start, o.End, o.Step = "range", start, end, step.String()
		o.Result, warnings, _, err = papi.QueryRange(ctx, q.Query, v1.Range{Start: start, End: end, Step: step}, v1.WithTimeout(timeout))
	} else {
		o.Type, o.Time = "instant", end
		o.Result, warnings, _, err = papi.Query(ctx, q.Query, end, v1.WithTimeout(timeout))
	}
	o.Duration = time.Since(t0).Seconds()
	o.Warnings = warnings
	if err != nil {
		o.Err, o.Reason, o.Error = err, stepkit.PromErrReason(err), clip.Line(promErrText(err), stepkit.MaxErrorText)
		if ctx.Err() != nil { // our deadline or the step's: say so, in its words, once
			cause := context.Cause(ctx)
			wrapped := err
			if !strings.Contains(err.Error(), cause.Error()) {
				wrapped = fmt.Errorf("%w: %w", cause, err)
			}
			o.Err = &vocab.Error{Reason: vocab.Classify(ctx.Err()), Err: wrapped}
			o.Reason, o.Error = vocab.Classify(ctx.Err()), cause.Error()
		}
		o.Result = nil
		return o
	}
	if o.Result != nil {
		o.ResultType = o.Result.Type().String()
	}
	return o
}

// promErrText is an API error with the server's own words when it sent some.
func promErrText(err error) string {
	s := err.Error()
	if d := apiErrDetail(err); d != "" {
		s += ": " + d
	}
	return s
}

// apiErrDetail extracts the "error" field of a Prometheus error body.
func apiErrDetail(err error) string {
	var ae *v1.Error
	if !errors.As(err, &ae) || ae.Detail == "" {
		return ""
	}
	var body struct {
		Error string `json:"error"`
	}
	if json.Unmarshal([]byte(ae.Detail), &body) == nil && body.Error != "" {
		return body.Error
	}
	return ae.Detail
}

// PutJSONArtifact stores v as an indented JSON artifact of res, or records
// why it could not under findings.artifact_error.
func PutJSONArtifact(ctx context.Context, in *vocab.Input, res *vocab.Result, name string, v any) {
	body, err := json.MarshalIndent(v, "", "  ")
	if err == nil {
		var a vocab.Artifact
		if a, err = stepkit.PutArtifact(ctx, in, name, "application/json", bytes.NewReader(body)); err == nil {
			res.Artifacts = append(res.Artifacts, a)
		}
	}
	if err != nil {
		res.Findings["artifact_error"] = err.Error()
	}
}

// Finite returns v, or nil for NaN and ±Inf, which JSON cannot carry.
func Finite(v float64) any {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return v
}
