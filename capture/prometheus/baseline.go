package prometheus

import (
	"fmt"
	"math"
	"time"

	"github.com/autocapture/autocapture/capture/internal/promkit"
	"github.com/autocapture/autocapture/vocab"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
)

// BaselineConfig says where a prometheus step reads the instance's own past:
// each query marked `baseline: true` is read again over Window, ending Gap
// before the alert's startsAt ("before"), and over the same stretch a day
// earlier ("day", when Prometheus keeps that far back). Both come from one
// query per signal (baselineQuery), and land as the signals
// <signal>_baseline and <signal>_baseline_1d.
type BaselineConfig struct {
	// Window is the stretch of time a baseline summarises. Default 30m.
	Window time.Duration `yaml:"window,omitempty" json:"window,omitempty"`
	// Gap is how long before startsAt the window ends: the incident began
	// before its alert fired (a rule's range and `for:`), and a baseline that
	// reaches into the onset hides it. Default 5m.
	Gap time.Duration `yaml:"gap,omitempty" json:"gap,omitempty"`
	// DayAgo also reads the same window 24 h earlier. Default true.
	DayAgo *bool `yaml:"day_ago,omitempty" json:"day_ago,omitempty"`
}

// DefaultBaseline is the baseline a prometheus step uses unless its config
// says otherwise.
var DefaultBaseline = BaselineConfig{Window: 30 * time.Minute, Gap: 5 * time.Minute, DayAgo: new(true)}

// withDefaults fills unset fields from DefaultBaseline.
func (b BaselineConfig) withDefaults() BaselineConfig {
	if b.Window == 0 {
		b.Window = DefaultBaseline.Window
	}
	if b.Gap == 0 {
		b.Gap = DefaultBaseline.Gap
	}
	if b.DayAgo == nil {
		b.DayAgo = DefaultBaseline.DayAgo
	}
	return b
}

func (b BaselineConfig) validate() error {
	switch {
	case b.Window < 0 || b.Gap < 0:
		return fmt.Errorf("baseline: negative window or gap")
	case b.Window > 0 && b.Window < time.Second:
		return fmt.Errorf("baseline: window %v: want at least 1s", b.Window)
	}
	return nil
}

// Baseline suffixes: the signal a baseline query gives, by the label value
// its series carries.
const (
	baselineLabel  = "baseline"
	baselineBefore = "before"
	baselineDay    = "day"
)

// baselineExpr parses query and returns it as it would read over window
// ending at the instant at: every range selector and subquery takes window as
// its range and `@ at`, and every selector outside a range `@ at`. A query
// with its own `@` or `offset` already says when it looks, and cannot be
// moved: that is a config error, as is a query whose result is not a vector.
func baselineExpr(query string, window time.Duration, at time.Time) (parser.Expr, error) {
	expr, err := parser.NewParser(parser.Options{}).ParseExpr(query)
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	if t := expr.Type(); t != parser.ValueTypeVector {
		return nil, fmt.Errorf("baseline: the query gives a %s, want an instant vector", t)
	}
	ts := at.UnixMilli()
	var moveErr error
	parser.Inspect(expr, func(node parser.Node, path []parser.Node) error {
		if moveErr != nil {
			return moveErr
		}
		for _, p := range path { // inside a subquery, its own steps set the time
			if _, ok := p.(*parser.SubqueryExpr); ok {
				return nil
			}
		}
		switch n := node.(type) {
		case *parser.SubqueryExpr:
			if n.Timestamp != nil || n.StartOrEnd != 0 || n.OriginalOffset != 0 || n.OriginalOffsetExpr != nil {
				moveErr = fmt.Errorf("baseline: %s has its own @ or offset", n.ShortString())
				return moveErr
			}
			n.Range, n.RangeExpr, n.Timestamp = window, nil, &ts
		case *parser.MatrixSelector:
			n.Range, n.RangeExpr = window, nil
		case *parser.VectorSelector:
			if n.Timestamp != nil || n.StartOrEnd != 0 || n.OriginalOffset != 0 || n.OriginalOffsetExpr != nil {
				moveErr = fmt.Errorf("baseline: %s has its own @ or offset", n.String())
				return moveErr
			}
			n.Timestamp = &ts
		}
		return nil
	})
	if moveErr != nil {
		return nil, moveErr
	}
	return expr, nil
}

// baselineQuery is the one query that reads q's baselines: the "before"
// window and, with day, the same window a day earlier, each result labelled
// baseline="before" or "day" and joined with `or`. A day Prometheus no
// longer (or not yet) holds gives no series, and only "before" comes back.
func baselineQuery(q promkit.PromQuery, b BaselineConfig, startsAt time.Time) (string, error) {
	end := startsAt.Add(-b.Gap)
	before, err := baselineExpr(q.Query, b.Window, end)
	if err != nil {
		return "", err
	}
	label := func(e parser.Expr, v string) string {
		return fmt.Sprintf(`label_replace(%s, %q, %q, "", "")`, e.String(), baselineLabel, v)
	}
	out := label(before, baselineBefore)
	if *b.DayAgo {
		day, _ := baselineExpr(q.Query, b.Window, end.Add(-24*time.Hour)) // parsed once above
		out += " or " + label(day, baselineDay)
	}
	return out, nil
}

// baselineSignals reads a baseline query's result: per label value, its
// largest finite sample (as queryFinding does for a signal).
func baselineSignals(sig string, v model.Value) vocab.Signals {
	vec, ok := v.(model.Vector)
	if !ok {
		return nil
	}
	out := vocab.Signals{}
	for _, s := range vec {
		x := float64(s.Value)
		if math.IsNaN(x) || math.IsInf(x, 0) {
			continue
		}
		var name string
		switch string(s.Metric[baselineLabel]) {
		case baselineBefore:
			name = vocab.BaselineOf(sig, false)
		case baselineDay:
			name = vocab.BaselineOf(sig, true)
		default:
			continue
		}
		if cur, seen := out[name]; !seen || x > cur {
			out[name] = x
		}
	}
	return out
}
