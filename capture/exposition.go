package capture

import (
	"bytes"
	"fmt"
	"math"
	"path"
	"sort"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// exposition is one parsed /metrics scrape, optionally narrowed to the series
// whose labels carry given values (a server's model_name, say).
type exposition struct {
	fams  map[string]*dto.MetricFamily
	where map[string]string
}

// parseExposition parses the Prometheus text format. vLLM's names contain ':',
// which the legacy name check accepts; UTF-8 validation accepts those and more.
func parseExposition(body []byte, where map[string]string) (exposition, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return exposition{}, fmt.Errorf("parse exposition: %w", err)
	}
	return exposition{fams: fams, where: where}, nil
}

// has says whether the exposition has a family called name.
func (e exposition) has(name string) bool {
	_, ok := e.fams[name]
	return ok
}

// family returns the first of m's names the exposition has.
func (e exposition) family(m vllmMetric) (*dto.MetricFamily, bool) {
	for _, n := range m {
		if f, ok := e.fams[n]; ok {
			return f, true
		}
	}
	return nil, false
}

// metrics returns the family's series that pass the label filter and keep.
func (e exposition) metrics(f *dto.MetricFamily, keep func(map[string]string) bool) []*dto.Metric {
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

// aggregation says how the series of one family combine into one number.
type aggregation int

const (
	aggSum aggregation = iota
	aggMax
)

// value combines a gauge's or counter's series; ok is false when none exist.
func (e exposition) value(m vllmMetric, agg aggregation, keep func(map[string]string) bool) (float64, bool) {
	f, ok := e.family(m)
	if !ok {
		return 0, false
	}
	ms := e.metrics(f, keep)
	if len(ms) == 0 {
		return 0, false
	}
	out := 0.0
	if agg == aggMax {
		out = math.Inf(-1)
	}
	for _, s := range ms {
		v := s.GetGauge().GetValue() + s.GetCounter().GetValue() + s.GetUntyped().GetValue()
		if agg == aggMax {
			out = math.Max(out, v)
		} else {
			out += v
		}
	}
	return out, true
}

// histogram is one histogram with every series merged (buckets added by upper
// bound), cumulative as exposed; the last bucket is +Inf.
type histogram struct {
	upper []float64
	cum   []float64
	count float64
	sum   float64
}

// histogram merges the series of m's first present family.
func (e exposition) histogram(m vllmMetric) (histogram, bool) {
	f, ok := e.family(m)
	if !ok || f.GetType() != dto.MetricType_HISTOGRAM {
		return histogram{}, false
	}
	ms := e.metrics(f, nil)
	if len(ms) == 0 {
		return histogram{}, false
	}
	byUpper := map[float64]float64{}
	var h histogram
	for _, s := range ms {
		hd := s.GetHistogram()
		n := float64(hd.GetSampleCount()) + hd.GetSampleCountFloat()
		h.count += n
		h.sum += hd.GetSampleSum()
		byUpper[math.Inf(1)] += n
		for _, b := range hd.GetBucket() {
			if !math.IsInf(b.GetUpperBound(), 1) {
				byUpper[b.GetUpperBound()] += float64(b.GetCumulativeCount()) + b.GetCumulativeCountFloat()
			}
		}
	}
	for u := range byUpper {
		h.upper = append(h.upper, u)
	}
	sort.Float64s(h.upper)
	for _, u := range h.upper {
		h.cum = append(h.cum, byUpper[u])
	}
	return h, true
}

// since returns the observations made after prev: bucket by bucket deltas. A
// counter reset (fewer observations than before) means the server restarted,
// and everything it has now came after prev.
func (h histogram) since(prev histogram) histogram {
	if h.count < prev.count || len(prev.upper) == 0 {
		return h
	}
	before := make(map[float64]float64, len(prev.upper))
	for i, u := range prev.upper {
		before[u] = prev.cum[i]
	}
	d := histogram{upper: h.upper, cum: make([]float64, len(h.cum)), count: h.count - prev.count, sum: h.sum - prev.sum}
	for i, u := range h.upper {
		d.cum[i] = math.Max(0, h.cum[i]-before[u])
	}
	return d
}

// mean is sum ÷ count; ok is false without observations.
func (h histogram) mean() (float64, bool) {
	if h.count <= 0 {
		return 0, false
	}
	return h.sum / h.count, true
}

// quantile estimates the q-quantile as PromQL's histogram_quantile does: find the
// bucket holding rank q×count and interpolate linearly inside it; a rank in the
// +Inf bucket answers the highest finite bound.
func (h histogram) quantile(q float64) (float64, bool) {
	n := len(h.upper)
	if n == 0 || h.count <= 0 || q < 0 || q > 1 {
		return 0, false
	}
	total := h.cum[n-1]
	if total <= 0 {
		return 0, false
	}
	rank := q * total
	i := sort.Search(n, func(i int) bool { return h.cum[i] >= rank })
	if i >= n-1 {
		if n < 2 {
			return 0, false
		}
		return h.upper[n-2], true
	}
	start, prevCum := 0.0, 0.0
	if i > 0 {
		start, prevCum = h.upper[i-1], h.cum[i-1]
	}
	end := h.upper[i]
	if h.cum[i] == prevCum {
		return end, true
	}
	return start + (end-start)*(rank-prevCum)/(h.cum[i]-prevCum), true
}

// familyNames returns the names of the families matching any of the glob
// patterns (path.Match syntax, e.g. "vllm:*"), sorted.
func (e exposition) familyNames(patterns []string) []string {
	var out []string
	for name := range e.fams {
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

// typeOf returns the family's type.
func (e exposition) typeOf(name string) dto.MetricType {
	return e.fams[name].GetType()
}
