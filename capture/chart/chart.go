package chart

import (
	"bytes"
	"context"
	"fmt"
	"image/color"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/autocapture/autocapture/capture/internal/stepkit"
	"github.com/autocapture/autocapture/vocab"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Config is the config of a `chart` step: a PNG line chart of one PromQL
// range query over the alert's window, sized for Slack's preview.
type Config struct {
	// Title heads the chart.
	Title string `yaml:"title" json:"title"`
	// Unit labels the y axis (e.g. "seconds", "requests").
	Unit string `yaml:"unit" json:"unit,omitempty"`
	// Query is the PromQL expression (templated by the runner).
	Query string `yaml:"query" json:"query"`
	// Threshold, when set, is drawn as a horizontal dashed line (the alert's).
	Threshold *float64 `yaml:"threshold" json:"threshold,omitempty"`
	// Step is the range query resolution (default: the window / 240, at least 1s).
	Step time.Duration `yaml:"step" json:"step,omitempty"`
}

// Chart geometry: 768×384 px at the renderer's 96 dpi.
const (
	chartWidth     = 8 * vg.Inch
	chartHeight    = 4 * vg.Inch
	chartMaxSeries = 8
)

// Chart is the `chart` step kind.
type Chart struct {
	cfg Config
}

var _ vocab.Step = (*Chart)(nil)

// Kind is the chart step kind; capture's registry takes it.
var Kind = vocab.Kind{
	Name:   "chart",
	Tier:   vocab.TierMetrics,
	Doc:    "A PNG line chart of a PromQL range query over the alert's window, with the alert's start and threshold marked.",
	Config: func() any { return &Config{} },
	Build:  buildChart,
}

func buildChart(c any) (vocab.Step, error) {
	cfg, ok := c.(*Config)
	if !ok {
		return nil, fmt.Errorf("chart: config is %T, want *Config", c)
	}
	if strings.TrimSpace(cfg.Query) == "" {
		return nil, fmt.Errorf("chart: query is required")
	}
	if cfg.Step < 0 {
		return nil, fmt.Errorf("chart: step %s is negative", cfg.Step)
	}
	out := *cfg
	if out.Title == "" {
		out.Title = out.Query
	}
	return &Chart{cfg: out}, nil
}

// Run queries the window and renders and stores the PNG.
func (c *Chart) Run(ctx context.Context, in *vocab.Input) (*vocab.Result, error) {
	if in.Env == nil || in.Env.Prometheus == nil || in.Env.Prometheus.URL == "" {
		return nil, vocab.NotConfigured("no Prometheus (set prometheus.url)")
	}
	if in.Env.Store == nil { // the daemon always has one (local by default): wiring, not the user's config
		return nil, vocab.Errorf(vocab.ReasonInternal, "chart: no artifact store")
	}
	m, err := c.query(ctx, in)
	if err != nil {
		return nil, err
	}
	png, shown, err := c.render(m, in.Alert.StartsAt, in.Window)
	if err != nil {
		return nil, vocab.Errorf(vocab.ReasonInternal, "chart %q: render: %w", c.cfg.Title, err)
	}
	art, err := stepkit.PutArtifact(ctx, in, "chart.png", "image/png", bytes.NewReader(png))
	if err != nil {
		return nil, err
	}
	f := map[string]any{"series": len(m), "shown": shown, "points": 0}
	// Idle minutes make rate ratios and histogram_quantile NaN: such points are
	// gaps, never a maximum (a NaN finding cannot even be stored as JSON).
	maxV, points := math.Inf(-1), 0
	for _, s := range m {
		for _, p := range s.Values {
			if v := float64(p.Value); !math.IsNaN(v) && !math.IsInf(v, 0) {
				points++
				maxV = math.Max(maxV, v)
			}
		}
	}
	f["points"] = points
	summary := fmt.Sprintf("%s: no data in the window", c.cfg.Title)
	if points > 0 {
		f["max"] = maxV
		summary = fmt.Sprintf("%s: %d series, max %.3g %s", c.cfg.Title, len(m), maxV, c.cfg.Unit)
		if c.cfg.Threshold != nil {
			f["above_threshold"] = maxV > *c.cfg.Threshold
		}
	}
	return &vocab.Result{Summary: strings.TrimSpace(summary), Findings: f, Artifacts: []vocab.Artifact{art}}, nil
}

// query runs the range query over the window.
func (c *Chart) query(ctx context.Context, in *vocab.Input) (model.Matrix, error) {
	pe := in.Env.Prometheus
	papi, err := stepkit.PromAPIOf(pe)
	if err != nil {
		return nil, err
	}
	step := c.cfg.Step
	if step == 0 {
		step = stepkit.RangeStep(in.Window.Start, in.Window.End)
	}
	r := promv1.Range{Start: in.Window.Start, End: in.Window.End, Step: step}
	v, _, _, err := papi.QueryRange(ctx, c.cfg.Query, r)
	if err != nil {
		// One line for the thread: the chart by its title; the query only when
		// it is the query that is wrong.
		reason := stepkit.PromErrReason(err)
		if reason == vocab.ReasonBadConfig {
			return nil, &vocab.Error{Reason: reason, Err: fmt.Errorf("chart %q: query %q: %w", c.cfg.Title, c.cfg.Query, err)}
		}
		return nil, &vocab.Error{Reason: reason, Err: fmt.Errorf("chart %q: Prometheus %s: %w", c.cfg.Title, pe.URL, err)}
	}
	m, ok := v.(model.Matrix)
	if !ok {
		return nil, vocab.Errorf(vocab.ReasonBadConfig, "chart: query %q gave a %s, want a range vector", c.cfg.Query, v.Type())
	}
	return m, nil
}

// render draws the matrix; it returns the PNG and how many series it shows.
func (c *Chart) render(m model.Matrix, startsAt time.Time, w vocab.Window) ([]byte, int, error) {
	p := plot.New()
	p.Title.Text = c.cfg.Title
	p.Title.TextStyle.Font.Size = vg.Points(15)
	p.Y.Label.Text = c.cfg.Unit
	p.X.Label.Text = "time (UTC)"
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font.Size = vg.Points(12)
		a.Tick.Label.Font.Size = vg.Points(11)
	}
	p.X.Tick.Marker = plot.TimeTicks{Format: "15:04:05", Time: func(t float64) time.Time { return time.Unix(int64(t), 0).UTC() }}
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.TextStyle.Font.Size = vg.Points(10)
	p.Add(plotter.NewGrid())
	p.X.Min, p.X.Max = float64(w.Start.Unix()), float64(w.End.Unix())
	series := worstFirst(m)
	shown := min(len(series), chartMaxSeries)
	common := commonLabels(series[:shown])
	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for i, s := range series[:shown] {
		xys := make(plotter.XYs, 0, len(s.Values))
		for _, v := range s.Values {
			x, y := float64(v.Timestamp.Unix()), float64(v.Value)
			if math.IsNaN(y) || math.IsInf(y, 0) {
				continue
			}
			xys = append(xys, plotter.XY{X: x, Y: y})
			xmin, xmax, ymin, ymax = math.Min(xmin, x), math.Max(xmax, x), math.Min(ymin, y), math.Max(ymax, y)
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, 0, err
		}
		l.Color, l.Width = plotutil.Color(i), vg.Points(2)
		p.Add(l)
		p.Legend.Add(seriesLabel(s.Metric, common), l)
	}
	if len(series) > shown {
		p.Title.Text += fmt.Sprintf(" (worst %d of %d series)", shown, len(series))
	}
	if math.IsInf(xmin, 1) { // no data: still a readable, empty chart
		p.Title.Text += " — no data"
		return c.encode(p, shown)
	}
	if c.cfg.Threshold != nil {
		ymin, ymax = math.Min(ymin, *c.cfg.Threshold), math.Max(ymax, *c.cfg.Threshold)
		if err := addRule(p, p.X.Min, *c.cfg.Threshold, p.X.Max, *c.cfg.Threshold, color.RGBA{R: 200, A: 255},
			fmt.Sprintf("threshold %g", *c.cfg.Threshold)); err != nil {
			return nil, 0, err
		}
	}
	if x := float64(startsAt.Unix()); !startsAt.IsZero() && x >= p.X.Min && x <= p.X.Max {
		if err := addRule(p, x, ymin, x, ymax, color.RGBA{R: 120, G: 120, B: 120, A: 255},
			"alert start "+startsAt.UTC().Format("15:04:05")); err != nil {
			return nil, 0, err
		}
	}
	p.Y.Min = math.Min(0, ymin)
	return c.encode(p, shown)
}

// addRule draws a dashed straight line with a legend entry.
func addRule(p *plot.Plot, x0, y0, x1, y1 float64, col color.Color, label string) error {
	l, err := plotter.NewLine(plotter.XYs{{X: x0, Y: y0}, {X: x1, Y: y1}})
	if err != nil {
		return err
	}
	l.Color, l.Width, l.Dashes = col, vg.Points(1.5), []vg.Length{vg.Points(6), vg.Points(4)}
	p.Add(l)
	p.Legend.Add(label, l)
	return nil
}

func (c *Chart) encode(p *plot.Plot, shown int) ([]byte, int, error) {
	wt, err := p.WriterTo(chartWidth, chartHeight, "png")
	if err != nil {
		return nil, 0, err
	}
	var buf bytes.Buffer
	if _, err := wt.WriteTo(&buf); err != nil {
		return nil, 0, err
	}
	return buf.Bytes(), shown, nil
}

// worstFirst orders series by their highest value, so the cap keeps the worst.
func worstFirst(m model.Matrix) model.Matrix {
	peak := func(s *model.SampleStream) float64 {
		v := math.Inf(-1)
		for _, p := range s.Values {
			if x := float64(p.Value); !math.IsNaN(x) && !math.IsInf(x, 0) {
				v = math.Max(v, x)
			}
		}
		return v
	}
	out := append(model.Matrix(nil), m...)
	sort.SliceStable(out, func(i, j int) bool { return peak(out[i]) > peak(out[j]) })
	return out
}

// commonLabels are the labels every one of several series shares: the legend
// leaves them out.
func commonLabels(ms model.Matrix) model.Metric {
	if len(ms) < 2 {
		return nil
	}
	common := model.Metric{}
	for n, v := range ms[0].Metric {
		common[n] = v
	}
	for _, s := range ms[1:] {
		for n, v := range common {
			if s.Metric[n] != v {
				delete(common, n)
			}
		}
	}
	return common
}

// seriesLabel is a short legend text: the labels that tell series apart.
func seriesLabel(m, common model.Metric) string {
	names := make([]string, 0, len(m))
	for n := range m {
		if _, shared := common[n]; !shared && n != model.MetricNameLabel && n != "job" {
			names = append(names, string(n))
		}
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, n+"="+string(m[model.LabelName(n)]))
	}
	s := strings.Join(parts, " ")
	if s == "" {
		s = string(m[model.MetricNameLabel])
	}
	if len(s) > 60 {
		s = s[:59] + "…"
	}
	return s
}
