// Package metricref writes the metrics reference (docs/metrics.md) from what a
// process registers: each metric's name, type and labels from its collector,
// its meaning from its Help text. The daemon's tests run it over the
// collectors the daemon registers and fail when the committed file differs,
// so the reference cannot drift from the registry.
package metricref

import (
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Metric is one row of the reference.
type Metric struct {
	Name   string
	Type   string // counter, gauge, histogram, summary or untyped
	Labels []string
	Help   string
}

// Section is one process's metrics under a heading.
type Section struct {
	Title, Intro string
	Metrics      []Metric
}

// FromCollectors describes the metrics of cs whose names start with prefix,
// sorted by name. The type of a vector comes from its Go type (a vector with
// no series yet exports none to read it from); any other collector is
// collected once and its series read. A metric whose type cannot be told,
// or that two collectors export, is an error naming it.
func FromCollectors(prefix string, cs []prometheus.Collector) ([]Metric, error) {
	var out []Metric
	for _, c := range cs {
		descs := describe(c)
		types, err := seriesTypes(c)
		if err != nil {
			return nil, err
		}
		for _, d := range descs {
			m, err := parseDesc(d)
			if err != nil {
				return nil, err
			}
			if !strings.HasPrefix(m.Name, prefix) {
				continue
			}
			if m.Type = vectorType(c); m.Type == "" {
				m.Type = types[d]
			}
			if m.Type == "" {
				return nil, fmt.Errorf("metricref: %s: its collector exported no series to read its type from", m.Name)
			}
			out = append(out, m)
		}
	}
	return sorted(out)
}

// FromGatherer describes the metric families g gathers whose names start
// with prefix. Only families with a series are gathered: a vector must have
// its label values set from zero to appear.
func FromGatherer(prefix string, g prometheus.Gatherer) ([]Metric, error) {
	fams, err := g.Gather()
	if err != nil {
		return nil, fmt.Errorf("metricref: gather: %w", err)
	}
	var out []Metric
	for _, f := range fams {
		if !strings.HasPrefix(f.GetName(), prefix) {
			continue
		}
		m := Metric{Name: f.GetName(), Type: strings.ToLower(f.GetType().String()), Help: f.GetHelp()}
		if len(f.GetMetric()) > 0 {
			for _, lp := range f.GetMetric()[0].GetLabel() {
				m.Labels = append(m.Labels, lp.GetName())
			}
		}
		out = append(out, m)
	}
	return sorted(out)
}

// Markdown is the reference: the preamble, then a table per section.
func Markdown(preamble string, sections []Section) []byte {
	var b bytes.Buffer
	b.WriteString(preamble)
	for _, s := range sections {
		fmt.Fprintf(&b, "\n## %s\n\n", s.Title)
		if s.Intro != "" {
			b.WriteString(s.Intro + "\n\n")
		}
		b.WriteString("| metric | type | labels | meaning |\n|---|---|---|---|\n")
		for _, m := range s.Metrics {
			labels := "—"
			if len(m.Labels) > 0 {
				labels = "`" + strings.Join(m.Labels, "`, `") + "`"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", m.Name, m.Type, labels, cell(m.Help))
		}
	}
	return b.Bytes()
}

// cell keeps a Help text on its table row.
func cell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.Join(strings.Fields(s), " ")
}

func sorted(ms []Metric) ([]Metric, error) {
	slices.SortFunc(ms, func(a, b Metric) int { return strings.Compare(a.Name, b.Name) })
	for i := 1; i < len(ms); i++ {
		if ms[i].Name == ms[i-1].Name {
			return nil, fmt.Errorf("metricref: %s is exported by two collectors", ms[i].Name)
		}
	}
	return ms, nil
}

func describe(c prometheus.Collector) []*prometheus.Desc {
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	var out []*prometheus.Desc
	for d := range ch {
		out = append(out, d)
	}
	return out
}

// seriesTypes collects c once and returns the type of each Desc it exported
// a series for.
func seriesTypes(c prometheus.Collector) (map[*prometheus.Desc]string, error) {
	ch := make(chan prometheus.Metric)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	out := map[*prometheus.Desc]string{}
	var err error
	for m := range ch {
		var pb dto.Metric
		if werr := m.Write(&pb); werr != nil {
			err = fmt.Errorf("metricref: %s: %w", m.Desc(), werr)
			continue // drain the channel: the collector blocks until it is read
		}
		out[m.Desc()] = seriesType(&pb)
	}
	return out, err
}

func seriesType(m *dto.Metric) string {
	switch {
	case m.Counter != nil:
		return "counter"
	case m.Gauge != nil:
		return "gauge"
	case m.Histogram != nil:
		return "histogram"
	case m.Summary != nil:
		return "summary"
	}
	return "untyped"
}

func vectorType(c prometheus.Collector) string {
	switch c.(type) {
	case *prometheus.CounterVec:
		return "counter"
	case *prometheus.GaugeVec:
		return "gauge"
	case *prometheus.HistogramVec:
		return "histogram"
	case *prometheus.SummaryVec:
		return "summary"
	}
	return ""
}

// descString is prometheus.Desc's String(), the only public view of its
// name, help and label names.
var descString = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: ("(?:[^"\\]|\\.)*"), (?:unit: "(?:[^"\\]|\\.)*", )?constLabels: \{(.*)\}, variableLabels: \{(.*)\}\}$`)

// constrainedLabel is how String() shows a label with a value constraint.
var constrainedLabel = regexp.MustCompile(`^c\((.*)\)$`)

func parseDesc(d *prometheus.Desc) (Metric, error) {
	s := d.String()
	p := descString.FindStringSubmatch(s)
	if p == nil {
		return Metric{}, fmt.Errorf("metricref: cannot read %s", s)
	}
	name, err := strconv.Unquote(p[1])
	if err != nil {
		return Metric{}, fmt.Errorf("metricref: name in %s: %w", s, err)
	}
	help, err := strconv.Unquote(p[2])
	if err != nil {
		return Metric{}, fmt.Errorf("metricref: help in %s: %w", s, err)
	}
	m := Metric{Name: name, Help: help}
	if p[4] != "" {
		for _, l := range strings.Split(p[4], ",") {
			if c := constrainedLabel.FindStringSubmatch(l); c != nil {
				l = c[1]
			}
			m.Labels = append(m.Labels, l)
		}
	}
	return m, nil
}
