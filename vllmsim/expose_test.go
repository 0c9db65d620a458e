package vllmsim

import (
	"fmt"
	"math"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/fixtures"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// textLine is one sample line of a text exposition, as written.
type textLine struct {
	name   string
	labels [][2]string // in written order; values unescaped only of \"
	value  string
}

var (
	lineRE  = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: -?\d+)?$`)
	labelRE = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?`)
)

func parseLines(t *testing.T, text string) []textLine {
	t.Helper()
	var out []textLine
	for _, l := range strings.Split(text, "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		m := lineRE.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("unparsable sample line %q", l)
		}
		tl := textLine{name: m[1], value: m[3]}
		for _, lm := range labelRE.FindAllStringSubmatch(m[2], -1) {
			tl.labels = append(tl.labels, [2]string{lm[1], lm[2]})
		}
		out = append(out, tl)
	}
	return out
}

func (l textLine) label(name string) (string, bool) {
	for _, lp := range l.labels {
		if lp[0] == name {
			return lp[1], true
		}
	}
	return "", false
}

func readText(t *testing.T, name string) string {
	t.Helper()
	return string(fixtures.Read(t, filepath.Join("vllm-metrics", name)))
}

// simText is a sim's /metrics body after some traffic (so histograms hold
// counts, sums and counters are non-zero).
func simText(t *testing.T, opts Options, run time.Duration) (string, *Sim) {
	t.Helper()
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	s.Advance(run)
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 || rec.Header().Get("Content-Type") != contentTypePython {
		t.Fatalf("GET /metrics: %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	return rec.Body.String(), s
}

func TestPyFloat(t *testing.T) {
	tenth := 0.1 // a variable: 0.1 + 0.2 in float64, not the exact constant 0.3
	for v, want := range map[float64]string{
		0: "0.0", 1: "1.0", 12: "12.0", -3: "-3.0", 0.5: "0.5", 2560: "2560.0", 7680: "7680.0",
		0.001: "0.001", 0.0001: "0.0001", 0.00001: "1e-05", 1.5e-7: "1.5e-07", 28.04: "28.04",
		tenth + 0.2: "0.30000000000000004", 123456: "123456.0", 999999.5: "999999.5",
		1048576: "1.048576e+06", 1e6: "1e+06", 5.8330112e9: "5.8330112e+09",
		39024848896: "3.9024848896e+010", 1.5227641069568e14: "1.5227641069568e+014",
		1e15: "1e+015", 1e16: "1e+16", 1.8446744073709552e19: "1.8446744073709552e+19",
		-1e20: "-1e+20", math.Inf(1): "+Inf", math.Inf(-1): "-Inf",
	} {
		if got := pyFloat(v); got != want {
			t.Errorf("pyFloat(%v) = %q, Python prints %q", v, got, want)
		}
	}
	if got := pyFloat(math.NaN()); got != "NaN" {
		t.Errorf("pyFloat(NaN) = %q", got)
	}
}

// TestPyFloatReproducesRealScrapes: every number Python's prometheus_client
// wrote in the recorded scrapes (sample values and le labels, ~1500 of
// them) is exactly what pyFloat writes for the value it parses back to;
// the Go-written cAdvisor lines appended to one scrape are not (so the
// check can tell the two apart).
func TestPyFloatReproducesRealScrapes(t *testing.T) {
	checked, goLines, goDiffer := 0, 0, 0
	for _, f := range []string{"v1-2026-09-inferstack-qwen2.5-1.5b.prom", "v1-2026-08-blackbox-rca-cpu.prom", "v0.5.x-2024-08-kubeai.prom"} {
		for _, l := range parseLines(t, readText(t, f)) {
			texts := []string{l.value}
			if le, ok := l.label("le"); ok {
				texts = append(texts, le)
			}
			for _, text := range texts {
				v, err := strconv.ParseFloat(text, 64)
				if err != nil {
					t.Fatalf("%s: %s: value %q: %v", f, l.name, text, err)
				}
				if strings.HasPrefix(l.name, "container_") { // cAdvisor, Go
					goLines++
					if pyFloat(v) != text {
						goDiffer++
					}
					continue
				}
				checked++
				if got := pyFloat(v); got != text {
					t.Errorf("%s: %s: Python wrote %q, pyFloat writes %q", f, l.name, text, got)
				}
			}
		}
	}
	if checked < 1400 || goLines != 4 || goDiffer == 0 {
		t.Fatalf("checked %d Python numbers; %d Go lines, %d differing", checked, goLines, goDiffer)
	}
}

// TestExpositionFormatMatchesRealVLLM holds the sim's /metrics text to the
// recorded scrapes of the same metric generation: for every histogram both
// expose, the le labels are the same strings in the same order (2026
// generation, whose buckets are identical) or, for the legacy generation
// against v0.5, every bound both have is spelled the same; every sample
// value is a Python float (no bare "12"); labels are sorted by name with le
// among them, as in the scrapes.
func TestExpositionFormatMatchesRealVLLM(t *testing.T) {
	for _, tc := range []struct {
		opts     Options
		fixtures []string
		sameLE   bool
	}{
		{Options{EngineConfig: EngineConfig{MaxModelLen: 2048}, Seed: 3}, []string{"v1-2026-09-inferstack-qwen2.5-1.5b.prom", "v1-2026-08-blackbox-rca-cpu.prom"}, true},
		{Options{LegacyMetrics: true, EngineConfig: EngineConfig{MaxModelLen: 16384}, Seed: 3}, []string{"v0.5.x-2024-08-kubeai.prom"}, false},
	} {
		text, _ := simText(t, tc.opts, 15*time.Second)
		got := parseLines(t, text)
		simLE := leByFamily(got)
		for _, f := range tc.fixtures {
			t.Run(fmt.Sprintf("legacy=%v/%s", tc.opts.LegacyMetrics, f), func(t *testing.T) {
				want := leByFamily(parseLines(t, readText(t, f)))
				compared := 0
				for name, w := range want {
					g, ok := simLE[name]
					if !ok {
						continue // the drift test owns which families exist
					}
					compared++
					if tc.sameLE {
						if !slices.Equal(g, w) {
							t.Errorf("%s: le labels\n sim   %q\n vLLM  %q", name, g, w)
						}
						continue
					}
					byValue := map[float64]string{}
					for _, le := range w {
						v, _ := strconv.ParseFloat(le, 64)
						byValue[v] = le
					}
					for _, le := range g {
						v, _ := strconv.ParseFloat(le, 64)
						if wl, ok := byValue[v]; ok && wl != le {
							t.Errorf("%s: sim le=%q, vLLM le=%q", name, le, wl)
						}
					}
				}
				if compared < 5 {
					t.Fatalf("only %d histograms in common", compared)
				}
			})
		}
		bare := regexp.MustCompile(`^-?[0-9]+$`)
		integral := 0
		for _, l := range got {
			v, err := strconv.ParseFloat(l.value, 64)
			if err != nil || pyFloat(v) != l.value || bare.MatchString(l.value) {
				t.Errorf("%s%v: value %q is not how Python prints %v", l.name, l.labels, l.value, v)
			}
			if v == math.Trunc(v) && !math.IsInf(v, 0) {
				integral++
			}
			names := make([]string, len(l.labels))
			for i, lp := range l.labels {
				names[i] = lp[0]
			}
			if !slices.IsSorted(names) {
				t.Errorf("%s: labels %v not sorted by name", l.name, names)
			}
		}
		if integral < 100 {
			t.Errorf("only %d integral sample values: the check saw nothing", integral)
		}
	}
}

// leByFamily lists each histogram's le labels in written order (first
// series only).
func leByFamily(lines []textLine) map[string][]string {
	out := map[string][]string{}
	first := map[string]string{}
	for _, l := range lines {
		name, ok := strings.CutSuffix(l.name, "_bucket")
		if !ok {
			continue
		}
		le, ok := l.label("le")
		if !ok {
			continue
		}
		var key strings.Builder
		for _, lp := range l.labels {
			if lp[0] != "le" {
				key.WriteString(lp[0] + "=" + lp[1] + ",")
			}
		}
		if f, seen := first[name]; seen && f != key.String() {
			continue
		}
		first[name] = key.String()
		out[name] = append(out[name], le)
	}
	return out
}

// TestExpositionIsLossless: Prometheus' own text parser reads the sim's
// Python-style exposition back to exactly the registry's values, series by
// series (escaping, histogram layout, +Inf, count and sum included).
func TestExpositionIsLossless(t *testing.T) {
	text, s := simText(t, Options{Scenario: ScenarioClientAborts, Model: `a "quoted" \ model`, Seed: 5}, 20*time.Second)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	parsed, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parse: %v\n%.500s", err, text)
	}
	gathered, err := s.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{}
	for _, mf := range gathered {
		flatten(mf, want)
	}
	got := map[string]float64{}
	for _, mf := range parsed {
		flatten(mf, got)
	}
	for k, v := range want {
		if strings.HasPrefix(k, "process_") {
			continue // moves between Gather and the scrape
		}
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s: registry %v, exposition %v (present %v)", k, v, g, ok)
		}
	}
	if len(got) != len(want) || len(want) < 300 {
		t.Errorf("exposition has %d series, registry %d", len(got), len(want))
	}
	if !strings.Contains(text, `model_name="a \"quoted\" \\ model"`) {
		t.Errorf("label value not escaped as Python does")
	}
}

// flatten adds mf's series to out, keyed name{sorted labels}; a histogram
// as its finite buckets, _count and _sum.
func flatten(mf *dto.MetricFamily, out map[string]float64) {
	for _, m := range mf.Metric {
		var lk []string
		for _, lp := range m.Label {
			lk = append(lk, lp.GetName()+"="+lp.GetValue())
		}
		slices.Sort(lk)
		key := func(suffix string, extra ...string) string {
			return mf.GetName() + suffix + "{" + strings.Join(append(slices.Clone(lk), extra...), ",") + "}"
		}
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			out[key("")] = m.GetCounter().GetValue()
		case dto.MetricType_GAUGE:
			out[key("")] = m.GetGauge().GetValue()
		case dto.MetricType_HISTOGRAM:
			h := m.GetHistogram()
			for _, b := range h.Bucket {
				if !math.IsInf(b.GetUpperBound(), 1) {
					out[key("_bucket", fmt.Sprintf("le=%g", b.GetUpperBound()))] = float64(b.GetCumulativeCount())
				}
			}
			out[key("_count")] = float64(h.GetSampleCount())
			out[key("_sum")] = h.GetSampleSum()
		}
	}
}
