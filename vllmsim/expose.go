package vllmsim

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// vLLM serves /metrics with Python's prometheus_client, whose text
// exposition differs from client_golang's in ways a user's query can see:
// numbers are Python floats (bucket le="1.0", le="2560.0", a count of 12 is
// "12.0"), and a Prometheus 2.x ingesting le="1" keeps "1", so a selector
// {le="1.0"} written against real vLLM would match nothing against a Go
// exposition. The sim writes its registry the way prometheus_client 0.0.4
// text does: per family HELP, TYPE, then the samples, a histogram's buckets
// then _count then _sum, labels sorted by name (le among them, as the
// recorded scrapes show), every number through pyFloat.

// contentTypePython is prometheus_client's CONTENT_TYPE_LATEST.
const contentTypePython = "text/plain; version=0.0.4; charset=utf-8"

// metricsHandler serves g in prometheus_client's text format.
func metricsHandler(g prometheus.Gatherer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mfs, err := g.Gather()
		if err != nil {
			http.Error(w, "gather: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", contentTypePython)
		bw := bufio.NewWriterSize(w, 32<<10)
		if err := writePythonText(bw, mfs); err != nil {
			return // the client went away, or a family type the sim never registers
		}
		_ = bw.Flush()
	})
}

// writePythonText writes mfs as prometheus_client's generate_latest does.
func writePythonText(w io.Writer, mfs []*dto.MetricFamily) error {
	var b strings.Builder
	for _, mf := range mfs {
		name := mf.GetName()
		b.Reset()
		fmt.Fprintf(&b, "# HELP %s %s\n", name, escapeHelp(mf.GetHelp()))
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			fmt.Fprintf(&b, "# TYPE %s counter\n", name)
			for _, m := range mf.Metric {
				sample(&b, name, m.Label, nil, m.GetCounter().GetValue())
			}
		case dto.MetricType_GAUGE:
			fmt.Fprintf(&b, "# TYPE %s gauge\n", name)
			for _, m := range mf.Metric {
				sample(&b, name, m.Label, nil, m.GetGauge().GetValue())
			}
		case dto.MetricType_UNTYPED:
			fmt.Fprintf(&b, "# TYPE %s untyped\n", name)
			for _, m := range mf.Metric {
				sample(&b, name, m.Label, nil, m.GetUntyped().GetValue())
			}
		case dto.MetricType_HISTOGRAM:
			fmt.Fprintf(&b, "# TYPE %s histogram\n", name)
			for _, m := range mf.Metric {
				h := m.GetHistogram()
				inf := false
				for _, bk := range h.Bucket {
					inf = inf || math.IsInf(bk.GetUpperBound(), 1)
					le := &dto.LabelPair{Name: new("le"), Value: new(pyFloat(bk.GetUpperBound()))}
					sample(&b, name+"_bucket", m.Label, le, float64(bk.GetCumulativeCount()))
				}
				if !inf {
					le := &dto.LabelPair{Name: new("le"), Value: new("+Inf")}
					sample(&b, name+"_bucket", m.Label, le, float64(h.GetSampleCount()))
				}
				sample(&b, name+"_count", m.Label, nil, float64(h.GetSampleCount()))
				sample(&b, name+"_sum", m.Label, nil, h.GetSampleSum())
			}
		default:
			return fmt.Errorf("metric family %s: type %v has no Python exposition here", name, mf.GetType())
		}
		if _, err := io.WriteString(w, b.String()); err != nil {
			return err
		}
	}
	return nil
}

// sample writes one line: name{labels} value, the labels (and extra, when
// set) sorted by name.
func sample(b *strings.Builder, name string, labels []*dto.LabelPair, extra *dto.LabelPair, v float64) {
	b.WriteString(name)
	if len(labels) > 0 || extra != nil {
		all := labels
		if extra != nil {
			all = append(slices.Clip(labels), extra)
			slices.SortFunc(all, func(x, y *dto.LabelPair) int { return strings.Compare(x.GetName(), y.GetName()) })
		}
		b.WriteByte('{')
		for i, lp := range all {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(lp.GetName())
			b.WriteString(`="`)
			b.WriteString(escapeLabel(lp.GetValue()))
			b.WriteByte('"')
		}
		b.WriteByte('}')
	}
	b.WriteByte(' ')
	b.WriteString(pyFloat(v))
	b.WriteByte('\n')
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

func escapeHelp(s string) string  { return helpEscaper.Replace(s) }
func escapeLabel(s string) string { return labelEscaper.Replace(s) }

// pyFloat is prometheus_client's floatToGoString: Python's repr of the
// float, except that a positive number with more than six digits before the
// point switches to an exponent (1048576.0 → "1.048576e+06"), with
// prometheus_client's quirk of printing the exponent as "e+0" and then the
// digit count, so 39024848896.0 is "3.9024848896e+010".
func pyFloat(d float64) string {
	switch {
	case math.IsInf(d, 1):
		return "+Inf"
	case math.IsInf(d, -1):
		return "-Inf"
	case math.IsNaN(d):
		return "NaN"
	}
	s := pyRepr(d)
	dot := strings.IndexByte(s, '.')
	if d > 0 && dot > 6 {
		mantissa := strings.TrimRight(s[:1]+"."+s[1:dot]+s[dot+1:], "0.")
		return mantissa + "e+0" + strconv.Itoa(dot-1)
	}
	return s
}

// pyRepr is Python's repr of a finite float: the shortest digits that read
// back as d (as Go's), in positional notation with at least one decimal
// ("12.0", "0.0001") when the decimal exponent is in [-4, 16), else in
// scientific notation with at least two exponent digits ("1e-05", "1e+16",
// "1.5e+300").
func pyRepr(d float64) string {
	if d == 0 {
		if math.Signbit(d) {
			return "-0.0"
		}
		return "0.0"
	}
	e := strconv.FormatFloat(d, 'e', -1, 64) // [-]d[.ddd]e±XX
	sign := ""
	if e[0] == '-' {
		sign, e = "-", e[1:]
	}
	mant, expText, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expText)
	digits := strings.Replace(mant, ".", "", 1)
	if exp < -4 || exp >= 16 {
		m := digits[:1]
		if len(digits) > 1 {
			m += "." + digits[1:]
		}
		es := "+"
		if exp < 0 {
			es, exp = "-", -exp
		}
		return fmt.Sprintf("%s%se%s%02d", sign, m, es, exp)
	}
	if exp < 0 {
		return sign + "0." + strings.Repeat("0", -exp-1) + digits
	}
	if len(digits) <= exp+1 {
		return sign + digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
	}
	return sign + digits[:exp+1] + "." + digits[exp+1:]
}
