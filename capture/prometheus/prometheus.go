// Package prometheus is the prometheus step: the tier-1 PromQL queries of a
// playbook, run in parallel against the configured Prometheus, their signals
// for triage, and the baselines a query marked `baseline` is read over
// before the incident (baseline.go).
package prometheus

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/autocapture/autocapture/capture/internal/promkit"
	"github.com/autocapture/autocapture/capture/internal/stepkit"
	"github.com/autocapture/autocapture/capture/internal/views"
	"github.com/autocapture/autocapture/vocab"
)

// Config is the prometheus step's config: PromQL queries against the
// configured Prometheus, run in parallel, each under its own deadline.
type Config struct {
	// Queries to run; their names key the findings.
	Queries []promkit.PromQuery `yaml:"queries" json:"queries"`
	// Baseline sets the windows the queries marked `baseline` are read over
	// before the incident (baseline.go); defaults DefaultBaseline.
	Baseline BaselineConfig `yaml:"baseline,omitempty" json:"baseline,omitempty"`
}

// Step is a built prometheus step.
type Step struct {
	cfg Config
}

var _ vocab.Step = (*Step)(nil)

// queryNameRE is what a query name must look like to be usable in `when`.
var queryNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// reservedFindings are finding keys the step writes itself.
var reservedFindings = map[string]bool{"failed": true, "source": true, "no_data": true,
	"summary": true, "verdict": true, "contributing": true, "signals": true, "status": true,
	vocab.FindingSignalWindows: true, vocab.FindingSignalLags: true, vocab.FindingSignalsAt: true, "baseline": true}

// Kind is the prometheus step kind, registered by capture/kinds.go.
var Kind = vocab.Kind{
	Name:   "prometheus",
	Tier:   vocab.TierMetrics,
	Doc:    "Runs PromQL instant and range queries against the configured Prometheus in parallel, each under its own deadline; findings per query, signals for triage, a JSON artifact.",
	Config: func() any { return &Config{} },
	Build:  func(cfg any) (vocab.Step, error) { return New(*cfg.(*Config)) },
}

// New validates cfg and returns the step.
func New(cfg Config) (*Step, error) {
	if len(cfg.Queries) == 0 {
		return nil, vocab.Errorf(vocab.ReasonBadConfig, "prometheus: no queries")
	}
	seen := map[string]bool{}
	for i, q := range cfg.Queries {
		where := fmt.Sprintf("prometheus: queries[%d] %q", i, q.Name)
		switch {
		case !queryNameRE.MatchString(q.Name):
			return nil, vocab.Errorf(vocab.ReasonBadConfig, "%s: name must be letters, digits and _", where)
		case reservedFindings[q.Name]:
			return nil, vocab.Errorf(vocab.ReasonBadConfig, "%s: name is reserved", where)
		case seen[q.Name]:
			return nil, vocab.Errorf(vocab.ReasonBadConfig, "%s: duplicate name", where)
		case strings.TrimSpace(q.Query) == "":
			return nil, vocab.Errorf(vocab.ReasonBadConfig, "%s: empty query", where)
		case q.Signal != "" && !vocab.KnownSignal(q.Signal):
			return nil, vocab.Errorf(vocab.ReasonBadConfig, "%s: unknown signal %q (known: %s)", where, q.Signal, strings.Join(vocab.SignalNames, ", "))
		case q.Signal != "" && q.Range:
			return nil, vocab.Errorf(vocab.ReasonBadConfig, "%s: signal needs an instant query, not range", where)
		case q.Step < 0 || q.Timeout < 0:
			return nil, vocab.Errorf(vocab.ReasonBadConfig, "%s: negative step or timeout", where)
		case q.Step > 0 && !q.Range:
			return nil, vocab.Errorf(vocab.ReasonBadConfig, "%s: step is for range queries", where)
		case q.Baseline && q.Signal == "":
			return nil, vocab.Errorf(vocab.ReasonBadConfig, "%s: baseline needs a signal", where)
		}
		if q.Baseline {
			if _, err := baselineExpr(q.Query, time.Minute, time.Unix(0, 0)); err != nil {
				return nil, vocab.Errorf(vocab.ReasonBadConfig, "%s: %w", where, err)
			}
		}
		seen[q.Name] = true
	}
	for _, q := range cfg.Queries {
		if q.Baseline && seen[q.Name+vocab.SuffixBaseline] {
			return nil, vocab.Errorf(vocab.ReasonBadConfig, "prometheus: query %q: its baseline is named %q, as another query is", q.Name, q.Name+vocab.SuffixBaseline)
		}
	}
	if err := cfg.Baseline.validate(); err != nil {
		return nil, vocab.Errorf(vocab.ReasonBadConfig, "prometheus: %w", err)
	}
	cfg.Baseline = cfg.Baseline.withDefaults()
	return &Step{cfg: cfg}, nil
}

// Run runs every query in parallel. A failed query is reported in the findings
// and the summary while the others keep their results; the step fails only when
// every query failed.
func (p *Step) Run(ctx context.Context, in *vocab.Input) (*vocab.Result, error) {
	pt, err := promkit.TargetOf(in, "prometheus")
	if err != nil {
		return nil, err
	}
	began := time.Now()
	startsAt := in.Alert.StartsAt
	if startsAt.IsZero() || startsAt.After(pt.End) {
		startsAt = pt.Start
	}
	queries, err := p.plan(startsAt)
	if err != nil {
		return nil, err
	}
	outs := pt.RunAll(ctx, queries)
	res, err := p.report(ctx, in, pt.Ep, queries, outs, time.Since(began))
	if res != nil && len(res.Signals) > 0 {
		describeSignals(res, queries, pt.End)
		p.describeBaselines(res, startsAt, pt.End)
	}
	return res, err
}

// plan is the queries to run: the configured ones, then, for each marked
// `baseline`, the one query that reads its baselines before startsAt.
func (p *Step) plan(startsAt time.Time) ([]promkit.PromQuery, error) {
	out := append([]promkit.PromQuery(nil), p.cfg.Queries...)
	for _, q := range p.cfg.Queries {
		if !q.Baseline {
			continue
		}
		bq, err := baselineQuery(q, p.cfg.Baseline, startsAt)
		if err != nil {
			return nil, vocab.Errorf(vocab.ReasonBadConfig, "prometheus: query %q: %w", q.Name, err)
		}
		out = append(out, promkit.PromQuery{Name: q.Name + vocab.SuffixBaseline, Query: bq, Timeout: q.Timeout, BaselineOf: q.Signal})
	}
	return out, nil
}

// describeBaselines records the window and lag of each baseline signal: the
// step's baseline window, ending its gap before startsAt (a day more for the
// day-ago one), and the windows themselves in findings.baseline.
func (p *Step) describeBaselines(res *vocab.Result, startsAt, end time.Time) {
	b := p.cfg.Baseline
	windows, _ := res.Findings[vocab.FindingSignalWindows].(map[string]float64)
	lags, _ := res.Findings[vocab.FindingSignalLags].(map[string]float64)
	if lags == nil {
		lags = map[string]float64{}
	}
	lag := end.Sub(startsAt.Add(-b.Gap)).Seconds()
	found := false
	for name := range res.Signals {
		day := strings.HasSuffix(name, vocab.SuffixBaselineDay)
		if !day && !strings.HasSuffix(name, vocab.SuffixBaseline) {
			continue
		}
		found = true
		windows[name] = b.Window.Seconds()
		lags[name] = lag
		if day {
			lags[name] += (24 * time.Hour).Seconds()
		}
	}
	if !found {
		return
	}
	res.Findings[vocab.FindingSignalLags] = lags
	res.Findings["baseline"] = map[string]any{"window_s": b.Window.Seconds(), "gap_s": b.Gap.Seconds(),
		"day_ago": *b.DayAgo, "ends": startsAt.Add(-b.Gap).UTC().Format(time.RFC3339)}
}

// describeSignals records, for each signal, the span of data its query
// summarises and how far before the window's end that data ends, read from
// the query's range selectors, `offset` and `@` (promWindow).
func describeSignals(res *vocab.Result, queries []promkit.PromQuery, end time.Time) {
	windows, lags := map[string]float64{}, map[string]float64{}
	for _, q := range queries {
		if _, ok := res.Signals[q.Signal]; !ok || q.Signal == "" {
			continue
		}
		w, lag := promkit.Window(q.Query, end)
		windows[q.Signal] = w.Seconds()
		if lag > 0 {
			lags[q.Signal] = lag.Seconds()
		}
	}
	res.Findings[vocab.FindingSignalWindows] = windows
	if len(lags) > 0 {
		res.Findings[vocab.FindingSignalLags] = lags
	}
	res.Findings[vocab.FindingSignalsAt] = end.UTC().Format(time.RFC3339Nano)
}

// report turns the outcomes into the step's result and stores the artifact.
func (p *Step) report(ctx context.Context, in *vocab.Input, ep *vocab.Endpoint, queries []promkit.PromQuery, outs []promkit.QueryOutcome, wall time.Duration) (*vocab.Result, error) {
	res := &vocab.Result{Findings: map[string]any{"source": vocab.SourcePromQL}, Signals: vocab.Signals{}}
	failed, firstErr := promkit.Failures(outs)
	var noData []string
	slowest := 0.0
	for i, o := range outs {
		slowest = max(slowest, o.Duration)
		if o.Err != nil {
			continue
		}
		f, sig, hasSig, hasData := promkit.QueryFinding(o.Result)
		if !hasData {
			noData = append(noData, o.Name)
			continue
		}
		res.Findings[o.Name] = f
		if q := queries[i]; q.Signal != "" && hasSig {
			res.Signals[q.Signal] = sig
		} else if q.BaselineOf != "" {
			res.Signals.Merge(baselineSignals(q.BaselineOf, o.Result))
		}
	}
	if len(failed) > 0 {
		res.Findings["failed"] = failed
	}
	if len(noData) > 0 {
		res.Findings["no_data"] = noData
	}
	promkit.PutJSONArtifact(ctx, in, res, "prometheus.json", map[string]any{"prometheus": stepkit.RedactURL(ep.URL), "wall_s": wall.Seconds(), "queries": outs})
	res.Summary = promSummary(outs, failed, noData, res.Signals, wall, slowest)
	return res, promkit.AllFailedErr("prometheus "+stepkit.RedactURL(ep.URL), outs, failed, firstErr)
}

// promSummary is the step's one line: counts, failures with their reasons, the signals.
func promSummary(outs []promkit.QueryOutcome, failed map[string]string, noData []string, sig vocab.Signals, wall time.Duration, slowest float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d PromQL queries in %.2fs (slowest %.2fs)", len(outs), wall.Seconds(), slowest)
	if len(failed) > 0 {
		fmt.Fprintf(&b, "; %d failed (%s)", len(failed), promkit.FailedNames(failed))
	}
	if len(noData) > 0 {
		fmt.Fprintf(&b, "; no data: %s", strings.Join(noData, ", "))
	}
	if len(sig) > 0 {
		b.WriteString("; " + views.SignalLine(sig))
	}
	return b.String()
}
