package exposition

import (
	"bytes"
	"fmt"
	"math"
	"path"
	"sort"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/autocapture/autocapture/vocab"
)

// Exposition is one parsed /metrics scrape, optionally narrowed to the series
// whose labels carry given values (a server's model_name, say).
type Exposition struct {
	Fams  map[string]*dto.MetricFamily
	where map[string]string
}

// ParseExposition parses the Prometheus text format. vLLM's names contain ':',
// which the legacy name check accepts; UTF-8 validation accepts those and more.
func ParseExposition(body []byte, where map[string]string) (Exposition, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return Exposition{}, fmt.Errorf("parse exposition: %w", err)
	}
	return Exposition{Fams: fams, where: where}, nil
}

// Has says whether the exposition has a family called name.
func (e Exposition) has(name string) bool {
	_, ok := e.Fams[name]
	return ok
}

// Has says whether the exposition has any of m's names.
func (e Exposition) Has(m Metric) bool {
	_, ok := e.family(m)
	return ok
}

// family returns the first of m's names the exposition has.
func (e Exposition) family(m Metric) (*dto.MetricFamily, bool) {
	for _, n := range m {
		if f, ok := e.Fams[n]; ok {
			return f, true
		}
	}
	return nil, false
}

// metrics returns the family's series that pass the label filter and keep.
func (e Exposition) metrics(f *dto.MetricFamily, keep func(map[string]string) bool) []*dto.Metric {
	var out []*dto.Metric
	for _, m := range f.GetMetric() {
		ls := make(map[string]string, len(m.GetLabel()))
		for _, lp := range m.GetLabel() {
			ls[lp.GetName()] = lp.GetValue()
		}
		ok := true
		for k, v := range e.where {
			if ls[k] != v {
				ok = false
			}
		}
		if ok && (keep == nil || keep(ls)) {
			out = append(out, m)
		}
	}
	return out
}

// Aggregation says how the series of one family combine into one number.
type Aggregation int

const (
	AggSum Aggregation = iota
	AggMax
)

// Value combines a gauge's or counter's series; ok is false when none exist.
func (e Exposition) Value(m Metric, agg Aggregation, keep func(map[string]string) bool) (float64, bool) {
	f, ok := e.family(m)
	if !ok {
		return 0, false
	}
	ms := e.metrics(f, keep)
	if len(ms) == 0 {
		return 0, false
	}
	out := 0.0
	if agg == AggMax {
		out = math.Inf(-1)
	}
	for _, s := range ms {
		v := s.GetGauge().GetValue() + s.GetCounter().GetValue() + s.GetUntyped().GetValue()
		if agg == AggMax {
			out = math.Max(out, v)
		} else {
			out += v
		}
	}
	return out, true
}

// Series is one gauge's or counter's series: its labels and value.
type Series struct {
	Labels map[string]string
	Value  float64
}

// Series lists the series of m's first present family that pass keep, for
// aggregations Value does not do (SGLang's: max over the TP ranks of one DP
// rank, summed over DP ranks).
func (e Exposition) Series(m Metric, keep func(map[string]string) bool) []Series {
	f, ok := e.family(m)
	if !ok {
		return nil
	}
	var out []Series
	for _, s := range e.metrics(f, keep) {
		ls := make(map[string]string, len(s.GetLabel()))
		for _, lp := range s.GetLabel() {
			ls[lp.GetName()] = lp.GetValue()
		}
		out = append(out, Series{Labels: ls, Value: s.GetGauge().GetValue() + s.GetCounter().GetValue() + s.GetUntyped().GetValue()})
	}
	return out
}

// Histogram is one histogram with every series merged (buckets added by upper
// bound), cumulative as exposed; the last bucket is +Inf.
type Histogram struct {
	Upper []float64
	Cum   []float64
	Count float64
	Sum   float64
}

// Histogram merges the series of m's first present family.
func (e Exposition) Histogram(m Metric) (Histogram, bool) { return e.HistogramWhere(m, nil) }

// HistogramWhere merges the series of m's first present family that pass
// keep (nil keeps all): SGLang's TTFT of streamed requests only, say.
func (e Exposition) HistogramWhere(m Metric, keep func(map[string]string) bool) (Histogram, bool) {
	f, ok := e.family(m)
	if !ok || f.GetType() != dto.MetricType_HISTOGRAM {
		return Histogram{}, false
	}
	ms := e.metrics(f, keep)
	if len(ms) == 0 {
		return Histogram{}, false
	}
	byUpper := map[float64]float64{}
	var h Histogram
	for _, s := range ms {
		hd := s.GetHistogram()
		n := float64(hd.GetSampleCount()) + hd.GetSampleCountFloat()
		h.Count += n
		h.Sum += hd.GetSampleSum()
		byUpper[math.Inf(1)] += n
		for _, b := range hd.GetBucket() {
			if !math.IsInf(b.GetUpperBound(), 1) {
				byUpper[b.GetUpperBound()] += float64(b.GetCumulativeCount()) + b.GetCumulativeCountFloat()
			}
		}
	}
	for u := range byUpper {
		h.Upper = append(h.Upper, u)
	}
	sort.Float64s(h.Upper)
	for _, u := range h.Upper {
		h.Cum = append(h.Cum, byUpper[u])
	}
	return h, true
}

// Since returns the observations made after prev: bucket by bucket deltas. A
// counter reset (fewer observations than before) means the server restarted,
// and everything it has now came after prev.
func (h Histogram) Since(prev Histogram) Histogram {
	if h.Count < prev.Count || len(prev.Upper) == 0 {
		return h
	}
	before := make(map[float64]float64, len(prev.Upper))
	for i, u := range prev.Upper {
		before[u] = prev.Cum[i]
	}
	d := Histogram{Upper: h.Upper, Cum: make([]float64, len(h.Cum)), Count: h.Count - prev.Count, Sum: h.Sum - prev.Sum}
	for i, u := range h.Upper {
		d.Cum[i] = math.Max(0, h.Cum[i]-before[u])
	}
	return d
}

// Mean is sum ÷ count; ok is false without observations.
func (h Histogram) Mean() (float64, bool) {
	if h.Count <= 0 {
		return 0, false
	}
	return h.Sum / h.Count, true
}

// Quantile estimates the q-quantile as PromQL's histogram_quantile does: find the
// bucket holding rank q×count and interpolate linearly inside it; a rank in the
// +Inf bucket answers the highest finite bound.
func (h Histogram) Quantile(q float64) (float64, bool) {
	n := len(h.Upper)
	if n == 0 || h.Count <= 0 || q < 0 || q > 1 {
		return 0, false
	}
	total := h.Cum[n-1]
	if total <= 0 {
		return 0, false
	}
	rank := q * total
	i := sort.Search(n, func(i int) bool { return h.Cum[i] >= rank })
	if i >= n-1 {
		if n < 2 {
			return 0, false
		}
		return h.Upper[n-2], true
	}
	start, prevCum := 0.0, 0.0
	if i > 0 {
		start, prevCum = h.Upper[i-1], h.Cum[i-1]
	}
	end := h.Upper[i]
	if h.Cum[i] == prevCum {
		return end, true
	}
	return start + (end-start)*(rank-prevCum)/(h.Cum[i]-prevCum), true
}

// LabelValues lists the values a label takes across the series of m's first
// present family (after the exposition's filter), sorted.
func (e Exposition) LabelValues(m Metric, label string) []string {
	f, ok := e.family(m)
	if !ok {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	for _, s := range e.metrics(f, nil) {
		for _, lp := range s.GetLabel() {
			if lp.GetName() == label && !seen[lp.GetValue()] {
				seen[lp.GetValue()] = true
				out = append(out, lp.GetValue())
			}
		}
	}
	sort.Strings(out)
	return out
}

// Engine says which serving engine's dialect the exposition speaks, by its
// families' prefix: vocab.EngineSGLang when it has "sglang:" families and no
// "vllm:" ones, else vocab.EngineVLLM (docs/engines.md).
func (e Exposition) Engine() string {
	if len(e.FamilyNames([]string{"sglang:*"})) > 0 && len(e.FamilyNames([]string{"vllm:*"})) == 0 {
		return vocab.EngineSGLang
	}
	return vocab.EngineVLLM
}

// FamilyNames returns the names of the families matching any of the glob
// patterns (path.Match syntax, e.g. "vllm:*"), sorted.
func (e Exposition) FamilyNames(patterns []string) []string {
	var out []string
	for name := range e.Fams {
		for _, p := range patterns {
			if ok, _ := path.Match(p, name); ok {
				out = append(out, name)
				break
			}
		}
	}
	sort.Strings(out)
	return out
}

// TypeOf returns the family's type.
func (e Exposition) TypeOf(name string) dto.MetricType {
	return e.Fams[name].GetType()
}
