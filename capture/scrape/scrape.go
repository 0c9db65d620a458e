// Package scrape is the scrape step: the alerting instance's /metrics read
// twice a gap apart, and the rates and latency quantiles over the gap
// (scrapecalc.go's Delta), on both vLLM metric generations and SGLang's eras
// (sglang.go): the engine and its era are told from the exposition itself.
package scrape

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/capture/internal/exposition"
	"github.com/autocapture/autocapture/capture/internal/sglangexpo"
	"github.com/autocapture/autocapture/capture/internal/stepkit"
	"github.com/autocapture/autocapture/capture/internal/views"
	"github.com/autocapture/autocapture/internal/clip"
	"github.com/autocapture/autocapture/vocab"
)

// Config is the scrape step's config: the alerting instance's own /metrics,
// read twice a gap apart, so that rates and latency quantiles over that gap come
// from the instance itself. Triage can answer from this alone when Prometheus is
// unreachable.
type Config struct {
	// Target is the instance's host:port; empty means the alert's `instance` label.
	// The connection goes through the targets allow-list.
	Target string `yaml:"target,omitempty" json:"target,omitempty"`
	// Scheme is http (default) or https.
	Scheme string `yaml:"scheme,omitempty" json:"scheme,omitempty"`
	// Path is the metrics path; default /metrics.
	Path string `yaml:"path,omitempty" json:"path,omitempty"`
	// Gap is the longest time between the two scrapes; default 5s.
	Gap time.Duration `yaml:"gap,omitempty" json:"gap,omitempty"`
	// MinRequests ends the gap early: the second scrape is the first one (polled
	// every second) by which this many requests have finished since the first,
	// enough for quantiles over the gap; a busy server (the usual case when an
	// alert fires) answers in a second or two, a quiet one waits the whole gap.
	// Default 20; -1 always waits the whole gap.
	MinRequests int `yaml:"min_requests,omitempty" json:"min_requests,omitempty"`
	// Timeout bounds each of the two requests; default 5s.
	Timeout time.Duration `yaml:"timeout,omitempty" json:"timeout,omitempty"`
	// Match lists metric-name globs reported in the findings; default the
	// engine's own families ("vllm:*" or "sglang:*", as the scrape finds).
	// Signals for triage are computed from the whole scrape either way.
	Match []string `yaml:"match,omitempty" json:"match,omitempty"`
	// Labels keeps only series carrying these label values, e.g.
	// {model_name: '{{ .Labels.model_name }}'}; default every series.
	Labels map[string]string `yaml:"labels,omitempty" json:"labels,omitempty"`
}

// Step is a built scrape step.
type Step struct {
	cfg Config
	// sleep waits out the gap; tests drive a simulated clock with it.
	sleep func(ctx context.Context, d time.Duration) error
	// poll is how often the gap checks for MinRequests finished requests.
	poll time.Duration
}

var _ vocab.Step = (*Step)(nil)

// SetSleep replaces how the step waits out the gap: tests that drive a
// simulated clock advance it here.
func (s *Step) SetSleep(sleep func(ctx context.Context, d time.Duration) error) { s.sleep = sleep }

// Kind is the scrape step kind, registered by capture/kinds.go.
var Kind = vocab.Kind{
	Name:   "scrape",
	Tier:   vocab.TierMetrics,
	Doc:    "Scrapes the alerting instance's /metrics twice a gap apart and computes rates and latency quantiles over the gap (vLLM of both metric generations, or SGLang of any era: the engine is told from the exposition).",
	Config: func() any { return &Config{} },
	Build:  func(cfg any) (vocab.Step, error) { return New(*cfg.(*Config)) },
}

// New validates cfg, applies its defaults and returns the step.
func New(cfg Config) (*Step, error) {
	if cfg.Scheme == "" {
		cfg.Scheme = "http"
	}
	if cfg.Path == "" {
		cfg.Path = "/metrics"
	}
	if cfg.Gap == 0 {
		cfg.Gap = 5 * time.Second
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.MinRequests == 0 {
		cfg.MinRequests = 20
	}
	switch {
	case cfg.Scheme != "http" && cfg.Scheme != "https":
		return nil, vocab.Errorf(vocab.ReasonBadConfig, "scrape: scheme %q: want http or https", cfg.Scheme)
	case !strings.HasPrefix(cfg.Path, "/"):
		return nil, vocab.Errorf(vocab.ReasonBadConfig, "scrape: path %q must start with /", cfg.Path)
	case cfg.Gap < 0 || cfg.Gap > 5*time.Minute:
		return nil, vocab.Errorf(vocab.ReasonBadConfig, "scrape: gap %v: want 0 < gap <= 5m", cfg.Gap)
	case cfg.MinRequests < -1:
		return nil, vocab.Errorf(vocab.ReasonBadConfig, "scrape: min_requests %d: want a count, or -1 to always wait the whole gap", cfg.MinRequests)
	case cfg.Timeout < 0:
		return nil, vocab.Errorf(vocab.ReasonBadConfig, "scrape: negative timeout %v", cfg.Timeout)
	case cfg.Target != "" && !stepkit.ValidHostPort(cfg.Target):
		return nil, vocab.Errorf(vocab.ReasonBadConfig, "scrape: target %q: want host:port", cfg.Target)
	}
	for _, p := range cfg.Match {
		if _, err := path.Match(p, ""); err != nil {
			return nil, vocab.Errorf(vocab.ReasonBadConfig, "scrape: match %q: %w", p, err)
		}
	}
	return &Step{cfg: cfg, sleep: stepkit.SleepCtx, poll: time.Second}, nil
}

// Run scrapes twice and reports the signals. A failed first scrape fails the
// step; a failed second one leaves the first scrape's gauges and lifetime
// ratios, with the failure noted in the findings. When the step's context ends
// during the gap, that partial result comes back with the context's error.
func (s *Step) Run(ctx context.Context, in *vocab.Input) (*vocab.Result, error) {
	target := s.cfg.Target
	if target == "" {
		target = in.Alert.Labels["instance"]
	}
	if in.Env == nil || in.Env.Targets == nil {
		return nil, vocab.Errorf(vocab.ReasonBadConfig, "scrape %s: no targets client configured", target)
	}
	if !stepkit.ValidHostPort(target) {
		return nil, vocab.Errorf(vocab.ReasonBadConfig, "scrape: target %q (from the alert's instance label): want host:port", target)
	}
	u := (&url.URL{Scheme: s.cfg.Scheme, Host: target, Path: s.cfg.Path}).String()
	res := &vocab.Result{Findings: map[string]any{"target": target, "url": u}}
	first, t1, err := s.fetch(ctx, in, u)
	if err != nil {
		r := vocab.Classify(err)
		res.Summary = fmt.Sprintf("scrape %s: %s", target, r)
		if r == vocab.ReasonRefused {
			res.Findings["refused"] = clip.Line(err.Error(), stepkit.MaxErrorText)
		}
		return res, err
	}
	s.keep(ctx, in, res, "scrape-1.txt", first)
	one := s.SampleOf(first, t1)
	prev, cur := one, (*Sample)(nil)
	var stopped error // the step's own deadline or cancellation ended the wait
	if cur, err = s.secondScrape(ctx, in, u, one); err != nil {
		res.Findings["second_scrape_error"] = clip.Line(err.Error(), stepkit.MaxErrorText)
		stepkit.Logger(in).Warn("The second scrape failed; reporting the first alone.", zap.String("url", u), zap.Error(err))
		prev, cur = nil, one
		if ctx.Err() != nil {
			stopped = &vocab.Error{Reason: vocab.Classify(ctx.Err()), Err: fmt.Errorf("scrape %s: stopped after the first scrape: %w", u, err)}
		}
	} else {
		s.keep(ctx, in, res, "scrape-2.txt", cur.body)
	}
	if err := s.Analyse(res, prev, cur); err != nil {
		return res, vocab.Errorf(vocab.ReasonBadConfig, "scrape %s: %w", u, err)
	}
	noteViewLag(res, in, one.at, cur.at)
	return res, stopped
}

// Findings with which the scrape says how far its view is from the moment
// the alert arrived (the run's acceptance, where the PromQL snapshot is
// evaluated): seconds from then to its first and its last read.
const (
	FindingViewLagFirst = "view_lag_first_s"
	FindingViewLag      = "view_lag_s"
)

// noteViewLag records how long after the alert arrived the scrape saw the
// instance (it can only see now; a run that waited for a worker sees later)
// and says so in the summary: "seen 0.1–4.2 s after the alert arrived".
func noteViewLag(res *vocab.Result, in *vocab.Input, first, last time.Time) {
	arrived := in.RunCreated
	if arrived.IsZero() {
		arrived = in.Window.End
	}
	if arrived.IsZero() {
		return
	}
	a, b := first.Sub(arrived).Seconds(), last.Sub(arrived).Seconds()
	res.Findings[FindingViewLagFirst], res.Findings[FindingViewLag] = a, b
	span := fmt.Sprintf("%.1f", b)
	if fmt.Sprintf("%.1f", a) != span {
		span = fmt.Sprintf("%.1f–%.1f", a, b)
	}
	res.Summary += " (seen " + span + " s after the alert arrived)"
}

// Sample is one scrape: its text, when it arrived, and its parse (done once).
type Sample struct {
	body []byte
	at   time.Time
	Exp  exposition.Exposition
	err  error // why the text did not parse
}

// SampleOf parses one scrape read at at.
func (s *Step) SampleOf(body []byte, at time.Time) *Sample {
	exp, err := exposition.ParseExposition(body, s.cfg.Labels)
	return &Sample{body: body, at: at, Exp: exp, err: err}
}

// Analyse fills the result's signals, findings and summary from the scrapes
// (prev is nil when only one worked).
func (s *Step) Analyse(res *vocab.Result, prev, last *Sample) error {
	if last.err != nil {
		return last.err
	}
	cur := last.Exp
	d := Delta{Cur: cur}
	if prev != nil {
		if prev.err != nil {
			return prev.err
		}
		d.Prev, d.Gap = &prev.Exp, last.at.Sub(prev.at)
	}
	gap := d.Gap
	res.Signals = d.Signals()
	if prev == nil {
		// One scrape: its histograms and counters cover the server's whole life
		// (weeks, perhaps), not the alert. Triage gets the gauges only; the rest
		// stays as labelled evidence.
		res.Findings["lifetime_signals"] = res.Signals
		res.Signals = d.gaugesOnly()
	}
	res.Findings[vocab.FindingSignalWindows] = d.Windows(res.Signals)
	res.Findings[vocab.FindingSignalsAt] = last.at.UTC().Format(time.RFC3339Nano)
	res.Findings["source"] = vocab.SourceScrape
	res.Findings["gap_s"] = gap.Seconds()
	engine, prefix, era := EngineOf(cur), "vllm:", exposition.GenerationOf(cur)
	res.Findings[vocab.FindingEngine] = engine
	if engine == vocab.EngineSGLang {
		prefix, era = sglangexpo.Prefix, sglangexpo.EraOf(cur.Fams)
		d.sglangFindings(res, era)
	} else {
		res.Findings["generation"] = era // the key vLLM runs have always had
	}
	res.Findings[vocab.FindingEra] = era
	match := s.cfg.Match
	if len(match) == 0 {
		match = []string{prefix + "*"}
	}
	res.Findings["metrics"] = d.metricFindings(match)
	if len(cur.FamilyNames([]string{"vllm:*", sglangexpo.Prefix + "*"})) == 0 {
		res.Summary = fmt.Sprintf("scrape of %s: no vLLM or SGLang series found", res.Findings["target"])
		return nil
	}
	over := "over " + gap.Round(100*time.Millisecond).String()
	if prev == nil {
		over = "(one scrape: gauges only; lifetime figures in findings)"
	}
	if engine == vocab.EngineSGLang {
		over = "(" + sglangexpo.Label(era) + ") " + over
	}
	res.Summary = fmt.Sprintf("scrape of %s %s: %s", res.Findings["target"], over, views.SignalLine(res.Signals))
	return nil
}

// keep stores one raw scrape; a store failure is noted, never fatal: the
// signals are the evidence, the raw text a convenience.
func (s *Step) keep(ctx context.Context, in *vocab.Input, res *vocab.Result, name string, body []byte) {
	a, err := stepkit.PutArtifact(ctx, in, name, "text/plain; version=0.0.4", bytes.NewReader(body))
	if err != nil {
		res.Findings["artifact_error"] = err.Error()
		return
	}
	res.Artifacts = append(res.Artifacts, a)
}

// secondScrape waits for the scrape that closes the gap: the first one, polled
// every s.poll, by which MinRequests requests have finished since the first
// scrape, or the one at Gap, whichever comes first. The gap ends by the clock
// (a slow /metrics does not stretch it) or by the time slept, whichever is first.
func (s *Step) secondScrape(ctx context.Context, in *vocab.Input, u string, first *Sample) (*Sample, error) {
	early := first.err == nil && s.cfg.MinRequests > 0 && s.poll > 0
	deadline := first.at.Add(s.cfg.Gap)
	var waited time.Duration
	for {
		wait := min(s.cfg.Gap-waited, deadline.Sub(stepkit.EnvNow(in.Env)))
		if early && wait > s.poll {
			wait = s.poll
		}
		if wait > 0 {
			if err := s.sleep(ctx, wait); err != nil {
				return nil, err
			}
			waited += wait
		}
		body, at, err := s.fetch(ctx, in, u)
		if err != nil {
			return nil, err
		}
		cur := s.SampleOf(body, at)
		if !early || cur.err != nil || waited >= s.cfg.Gap || !at.Before(deadline) {
			return cur, nil
		}
		if n, ok := (Delta{Prev: &first.Exp, Cur: cur.Exp}).finished(); ok && n >= float64(s.cfg.MinRequests) {
			return cur, nil
		}
	}
}

// fetch GETs the exposition under the per-request timeout and notes when it arrived.
func (s *Step) fetch(ctx context.Context, in *vocab.Input, u string) ([]byte, time.Time, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, s.cfg.Timeout, fmt.Errorf("scrape %s: no answer within %v", u, s.cfg.Timeout))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, time.Time{}, vocab.Errorf(vocab.ReasonBadConfig, "scrape %s: %w", u, err)
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4;q=1,*/*;q=0.1")
	resp, err := in.Env.Targets.Do(req)
	if err != nil {
		reason := vocab.Classify(err)
		if ctx.Err() != nil { // the request's deadline or the step's
			reason = vocab.Classify(ctx.Err())
		}
		return nil, time.Time{}, &vocab.Error{Reason: reason, Err: fmt.Errorf("scrape %s: %w", u, err)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, stepkit.MaxScrapeBytes+1))
	if err != nil {
		return nil, time.Time{}, &vocab.Error{Reason: vocab.Classify(err), Err: fmt.Errorf("scrape %s: read: %w", u, err)}
	}
	if resp.StatusCode/100 != 2 {
		return nil, time.Time{}, stepkit.HTTPStatusError("scrape "+u, resp.StatusCode, string(body))
	}
	if len(body) > stepkit.MaxScrapeBytes {
		return nil, time.Time{}, vocab.Errorf(vocab.ReasonUpstream5xx, "scrape %s: more than %d bytes", u, stepkit.MaxScrapeBytes)
	}
	return body, stepkit.EnvNow(in.Env), nil
}
