package vllmsim

import (
	"bufio"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
)

// pyRegistry is SGLang's /metrics as prometheus_client prints it in
// multiprocess mode (SGLANG.md §1), which differs from vLLM's single-process
// text (expose.go) in what a reader can see:
//   - a series exists only once written (a child created by .labels()); a
//     family with no series prints nothing, not even HELP and TYPE;
//   - no _created series and no process_/python_ families;
//   - a histogram prints _sum, then its cumulative buckets, then _count
//     (the bucket total), as MultiProcessCollector accumulates them;
//   - labels are sorted by name, le among them; numbers go through pyFloat.
//
// Families print in the order they were declared. The recorded scrapes show
// counters, then histograms, then gauges for the tokenizer/scheduler split
// (fixtures 2–3), which is the order the SGLang surfaces declare them in.
type pyRegistry struct {
	mu   sync.Mutex
	fams []*pyFamily
}

type pyType string

const (
	pyCounter   pyType = "counter"
	pyGauge     pyType = "gauge"
	pyHistogram pyType = "histogram"
)

// pyFamily is one metric family: its name (a counter's with _total), HELP,
// type, label names and, for a histogram, its finite bucket bounds.
type pyFamily struct {
	reg     *pyRegistry
	name    string
	help    string
	typ     pyType
	labels  []string
	buckets []float64
	series  []*pySeries
	index   map[string]*pySeries
}

// pySeries is one labelled child: a value, or a histogram's per-bucket
// counts (not cumulative; the last is +Inf) and sum.
type pySeries struct {
	fam    *pyFamily
	values []string
	v      float64
	counts []float64
	sum    float64
}

func newPyRegistry() *pyRegistry { return &pyRegistry{} }

// family declares a family; labels are its label names in any order.
func (r *pyRegistry) family(name, help string, typ pyType, labels []string, buckets []float64) *pyFamily {
	f := &pyFamily{reg: r, name: name, help: help, typ: typ, labels: labels, buckets: buckets, index: map[string]*pySeries{}}
	r.fams = append(r.fams, f)
	return f
}

// with returns the child with these label values (aligned with the family's
// label names), creating it at zero: the moment a series starts to exist.
func (f *pyFamily) with(values ...string) *pySeries {
	if len(values) != len(f.labels) {
		panic("vllmsim: " + f.name + ": label values do not match " + strings.Join(f.labels, ","))
	}
	key := strings.Join(values, "\xff")
	f.reg.mu.Lock()
	defer f.reg.mu.Unlock()
	if s, ok := f.index[key]; ok {
		return s
	}
	s := &pySeries{fam: f, values: slices.Clone(values)}
	if f.typ == pyHistogram {
		s.counts = make([]float64, len(f.buckets)+1)
	}
	f.index[key] = s
	f.series = append(f.series, s)
	return s
}

func (s *pySeries) set(v float64) {
	s.fam.reg.mu.Lock()
	s.v = v
	s.fam.reg.mu.Unlock()
}

func (s *pySeries) add(v float64) {
	s.fam.reg.mu.Lock()
	s.v += v
	s.fam.reg.mu.Unlock()
}

// observe adds one observation of v.
func (s *pySeries) observe(v float64) { s.observeWeighted(v, v, 1) }

// observeWeighted adds sum to _sum and n to the bucket holding at: SGLang's
// token-weighted inter-token latency (SGLANG.md §4) adds a chunk's interval
// to the sum and its token count to the bucket of interval/tokens.
func (s *pySeries) observeWeighted(at, sum, n float64) {
	i, _ := slices.BinarySearch(s.fam.buckets, at) // first bound >= at: le is inclusive
	s.fam.reg.mu.Lock()
	s.counts[i] += n
	s.sum += sum
	s.fam.reg.mu.Unlock()
}

// handler serves the registry as prometheus_client's text format.
func (r *pyRegistry) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", contentTypePython)
		bw := bufio.NewWriterSize(w, 32<<10)
		if r.write(bw) == nil {
			_ = bw.Flush()
		}
	})
}

// write prints every family that has a series.
func (r *pyRegistry) write(w io.Writer) error {
	var b strings.Builder
	r.mu.Lock()
	for _, f := range r.fams {
		if len(f.series) == 0 {
			continue
		}
		b.WriteString("# HELP " + f.name + " " + escapeHelp(f.help) + "\n")
		b.WriteString("# TYPE " + f.name + " " + string(f.typ) + "\n")
		for _, s := range f.series {
			if f.typ != pyHistogram {
				pySample(&b, f.name, f.labels, s.values, "", s.v)
				continue
			}
			pySample(&b, f.name+"_sum", f.labels, s.values, "", s.sum)
			acc := 0.0
			for i, c := range s.counts {
				acc += c
				le := math.Inf(1)
				if i < len(f.buckets) {
					le = f.buckets[i]
				}
				pySample(&b, f.name+"_bucket", f.labels, s.values, pyFloat(le), acc)
			}
			pySample(&b, f.name+"_count", f.labels, s.values, "", acc)
		}
	}
	r.mu.Unlock()
	_, err := io.WriteString(w, b.String())
	return err
}

// pySample writes one line, the labels (and le when set) sorted by name.
func pySample(b *strings.Builder, name string, names, values []string, le string, v float64) {
	type pair struct{ k, v string }
	pairs := make([]pair, 0, len(names)+1)
	for i, n := range names {
		pairs = append(pairs, pair{n, values[i]})
	}
	if le != "" {
		pairs = append(pairs, pair{"le", le})
	}
	slices.SortFunc(pairs, func(x, y pair) int { return strings.Compare(x.k, y.k) })
	b.WriteString(name)
	if len(pairs) > 0 {
		b.WriteByte('{')
		for i, p := range pairs {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(p.k + `="` + escapeLabel(p.v) + `"`)
		}
		b.WriteByte('}')
	}
	b.WriteString(" " + pyFloat(v) + "\n")
}
