// Package peers is the peers step: the alerting instance's signals beside
// every other instance serving its model, stored as a views.PeerView under
// views.FindingPeers for triage's scope.
package peers

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/autocapture/autocapture/capture/internal/promkit"
	"github.com/autocapture/autocapture/capture/internal/stepkit"
	"github.com/autocapture/autocapture/capture/internal/views"
	"github.com/autocapture/autocapture/vocab"
	"github.com/prometheus/common/model"
)

// Config is the peers step's config: the same signals for every
// instance serving the alerting instance's model, one PromQL query per signal
// grouped by instance, so the number of queries does not grow with the fleet.
type Config struct {
	// Selector is the PromQL label matchers choosing the peers, rendered from
	// the alert (`model_name={{ .Labels.model_name | promQuote }}`). Empty (the
	// alert has no model label) is a finding, "peers not measured", not an error.
	Selector string `yaml:"selector" json:"selector"`
	// Label names an instance in the queries' results. Default "instance".
	Label string `yaml:"label,omitempty" json:"label,omitempty"`
	// Self is the alerting instance as Label spells it. Default the alert's
	// label named by Label.
	Self string `yaml:"self,omitempty" json:"self,omitempty"`
	// Queries are one instant query per canonical signal. Each writes
	// `$peers` where the selector goes and groups by Label, e.g.
	// `sum by (instance) (vllm:num_requests_waiting{$peers})`.
	Queries []PeerQuery `yaml:"queries" json:"queries"`
}

// PeerQuery is one signal's query over the whole fleet.
type PeerQuery struct {
	// Signal is the canonical signal (vocab/signals.go) the query reads.
	Signal string `yaml:"signal" json:"signal"`
	// Query is PromQL with `$peers` for the selector, grouped by the instance label.
	Query string `yaml:"query" json:"query"`
	// Timeout bounds this query; default the Prometheus endpoint's timeout, else 10s.
	Timeout time.Duration `yaml:"timeout,omitempty" json:"timeout,omitempty"`
}

// Step is a built peers step.
type Step struct {
	cfg Config
}

var _ vocab.Step = (*Step)(nil)

// peersPlaceholder is where a peers query takes the selector.
const peersPlaceholder = "$peers"

var labelNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Kind is the peers step kind, registered by capture/kinds.go.
var Kind = vocab.Kind{
	Name: "peers",
	Tier: vocab.TierMetrics,
	Doc: "Reads the same signals for every instance serving the alert's model from Prometheus, one query per signal grouped by instance, " +
		"so triage can say whether the cause is this instance, several or the whole fleet.",
	Config: func() any { return &Config{} },
	Build:  func(cfg any) (vocab.Step, error) { return New(*cfg.(*Config)) },
}

// New validates cfg, fills its defaults and returns the step.
func New(cfg Config) (*Step, error) {
	if cfg.Label == "" {
		cfg.Label = "instance"
	}
	if !labelNameRE.MatchString(cfg.Label) {
		return nil, vocab.Errorf(vocab.ReasonBadConfig, "peers: label %q is not a label name", cfg.Label)
	}
	if len(cfg.Queries) == 0 {
		return nil, vocab.Errorf(vocab.ReasonBadConfig, "peers: no queries")
	}
	seen := map[string]bool{}
	for i, q := range cfg.Queries {
		where := fmt.Sprintf("peers: queries[%d] %q", i, q.Signal)
		switch {
		case !vocab.KnownSignal(q.Signal):
			return nil, vocab.Errorf(vocab.ReasonBadConfig, "%s: unknown signal (known: %s)", where, strings.Join(vocab.SignalNames, ", "))
		case seen[q.Signal]:
			return nil, vocab.Errorf(vocab.ReasonBadConfig, "%s: duplicate signal", where)
		case !strings.Contains(q.Query, peersPlaceholder):
			return nil, vocab.Errorf(vocab.ReasonBadConfig, "%s: the query has no %s: it would not read the peers", where, peersPlaceholder)
		case q.Timeout < 0:
			return nil, vocab.Errorf(vocab.ReasonBadConfig, "%s: negative timeout", where)
		}
		seen[q.Signal] = true
	}
	return &Step{cfg: cfg}, nil
}

// Run runs every signal's query in parallel, each under its own deadline. A
// missing selector or instance is a finding; the step fails only when every
// query failed.
func (p *Step) Run(ctx context.Context, in *vocab.Input) (*vocab.Result, error) {
	view := &views.PeerView{Label: p.cfg.Label, Self: p.cfg.Self, Selector: strings.TrimSpace(p.cfg.Selector),
		Instances: []string{}, Signals: map[string]map[string]float64{}}
	if view.Self == "" {
		view.Self = in.Alert.Labels[p.cfg.Label]
	}
	res := &vocab.Result{Findings: map[string]any{"source": vocab.SourcePromQL, views.FindingPeers: view}}
	if view.Selector == "" || view.Self == "" {
		res.Summary = "peers not measured: " + p.unmeasured(view)
		res.Findings["not_measured"] = res.Summary
		return res, nil
	}
	pt, err := promkit.TargetOf(in, "peers")
	if err != nil {
		return nil, err
	}
	queries := make([]promkit.PromQuery, len(p.cfg.Queries))
	for i, q := range p.cfg.Queries {
		queries[i] = promkit.PromQuery{Name: q.Signal, Query: strings.ReplaceAll(q.Query, peersPlaceholder, view.Selector), Timeout: q.Timeout}
		if w, _ := promkit.Window(queries[i].Query, pt.End); q.Signal == vocab.SigArrivalRate || q.Signal == vocab.SigRequestRate {
			view.Window = max(view.Window, w.Seconds())
		}
	}
	began := time.Now()
	outs := pt.RunAll(ctx, queries) // instant queries: at the window's end
	return p.report(ctx, in, pt.Ep, view, res, outs, time.Since(began))
}

// unmeasured says why the step could not look for peers.
func (p *Step) unmeasured(v *views.PeerView) string {
	if v.Selector == "" {
		return "the peers' selector is empty (does the alert carry the model label?)"
	}
	return fmt.Sprintf("the alert has no %s label to find this instance among its peers", p.cfg.Label)
}

// report fills the view from the outcomes, stores the artifact and sums up.
func (p *Step) report(ctx context.Context, in *vocab.Input, ep *vocab.Endpoint, view *views.PeerView, res *vocab.Result, outs []promkit.QueryOutcome, wall time.Duration) (*vocab.Result, error) {
	seen := map[string]bool{}
	var firstErr *promkit.QueryOutcome
	view.Failed, firstErr = promkit.Failures(outs)
	for _, o := range outs {
		if o.Err != nil {
			continue
		}
		vec, _ := o.Result.(model.Vector)
		for _, s := range vec {
			inst, x := string(s.Metric[model.LabelName(p.cfg.Label)]), float64(s.Value)
			if inst == "" || math.IsNaN(x) || math.IsInf(x, 0) {
				continue
			}
			if view.Signals[o.Name] == nil {
				view.Signals[o.Name] = map[string]float64{}
			}
			view.Signals[o.Name][inst] = x
			seen[inst] = true
		}
	}
	for inst := range seen {
		view.Instances = append(view.Instances, inst)
	}
	sort.Strings(view.Instances)
	if len(view.Failed) > 0 {
		res.Findings["failed"] = view.Failed
	}
	promkit.PutJSONArtifact(ctx, in, res, "peers.json", map[string]any{"prometheus": stepkit.RedactURL(ep.URL), "wall_s": wall.Seconds(),
		"selector": view.Selector, "queries": outs})
	res.Summary = peersSummary(view, p.cfg.Queries, len(outs), wall)
	return res, promkit.AllFailedErr("peers "+stepkit.RedactURL(ep.URL), outs, view.Failed, firstErr)
}

// peersSummary is the step's line: "6 instances of {model_name="m"}; this
// one: queue_depth 48, peers' median 0", then the queries and their failures.
func peersSummary(v *views.PeerView, qs []PeerQuery, n int, wall time.Duration) string {
	var b strings.Builder
	switch peers := v.PeerCount(); {
	case len(v.Instances) == 0:
		fmt.Fprintf(&b, "no instance has data under {%s}: peers not measured", v.Selector)
	case peers == 0:
		fmt.Fprintf(&b, "only this instance (%s) has data under {%s}: no peers", v.Self, v.Selector)
	default:
		fmt.Fprintf(&b, "%d instances of {%s}", len(v.Instances), v.Selector)
		if !v.Has(v.Self) {
			fmt.Fprintf(&b, "; this one (%s) has no data", v.Self)
		}
		for _, q := range qs {
			self, okS := v.Signals[q.Signal][v.Self]
			med, k := v.PeerMedian(q.Signal)
			if okS && k > 0 {
				fmt.Fprintf(&b, "; this one: %s %s, peers' median %s", q.Signal, views.FmtNum(self), views.FmtNum(med))
				break
			}
		}
	}
	fmt.Fprintf(&b, " (%d queries in %.2fs", n, wall.Seconds())
	if len(v.Failed) > 0 {
		fmt.Fprintf(&b, "; %d failed: %s", len(v.Failed), promkit.FailedNames(v.Failed))
	}
	return b.String() + ")"
}
