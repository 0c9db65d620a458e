package gpu

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/capture/internal/views"
	"github.com/autocapture/autocapture/internal/testkit/steptest"
	"github.com/autocapture/autocapture/vocab"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
)

// dcgmLabels are a DCGM exporter's labels for one GPU (GPU.md's example).
func dcgmLabels(name, gpu, uuid, host string) model.Metric {
	return model.Metric{model.MetricNameLabel: model.LabelValue(name), "gpu": model.LabelValue(gpu),
		"UUID": model.LabelValue(uuid), "device": model.LabelValue("nvidia" + gpu), "modelName": "NVIDIA H100 80GB HBM3",
		"Hostname": model.LabelValue(host), "instance": model.LabelValue(host + ":9400"), "job": "dcgm"}
}

// series is one raw series with a sample every 30 s from t0, in order.
func series(m model.Metric, t0 time.Time, vals ...float64) *model.SampleStream {
	ss := &model.SampleStream{Metric: m}
	for i, v := range vals {
		ss.Values = append(ss.Values, model.SamplePair{Timestamp: model.TimeFromUnixNano(t0.Add(time.Duration(i) * 30 * time.Second).UnixNano()), Value: model.SampleValue(v)})
	}
	return ss
}

func withLabel(m model.Metric, k, v string) model.Metric {
	c := m.Clone()
	c[model.LabelName(k)] = model.LabelValue(v)
	return c
}

func TestDecodeClockEvents(t *testing.T) {
	if got := decodeClockEvents(0x1 | 0x4 | 0x20); !slices.Equal(got, []string{"gpu_idle", "power_cap", "sw_thermal"}) {
		t.Fatalf("0x25 = %v", got)
	}
	if got := decodeClockEvents(0x1ff); len(got) != 9 || got[8] != "display_clocks" || got[7] != "hw_power_brake" {
		t.Fatalf("0x1ff = %v", got)
	}
}

func TestDCGMBlankSentinels(t *testing.T) {
	// dcgm_fields.h: DCGM_INT32_BLANK 0x7ffffff0 (+1 not found, +2 not
	// supported, +3 not permissioned), DCGM_INT64_BLANK 0x7ffffffffffffff0
	// (9223372036854775794 is its NOT_SUPPORTED), DCGM_FP64_BLANK 2^47.
	for _, v := range []float64{0x7ffffff0, 0x7ffffff2, 0x7ffffff3, 9223372036854775794, 140737488355328, 140737488355330} {
		if !dcgmBlank("DCGM_FI_DEV_SM_CLOCK", v) {
			t.Errorf("%v is a sentinel", v)
		}
	}
	for _, v := range []float64{0, 1980, 88, 699.5, 0x7fffffef} {
		if dcgmBlank("DCGM_FI_DEV_SM_CLOCK", v) {
			t.Errorf("%v is a value", v)
		}
	}
	if dcgmBlank("DCGM_FI_DEV_SM_CLOCK_HERTZ", 2147483640) || !dcgmBlank("DCGM_FI_DEV_SM_CLOCK_HERTZ", 9223372036854775794) {
		t.Error("a 4.7 Hz clock may pass 2^31; only the 64-bit blanks are sentinels for it")
	}
}

// TestGPUAccumulatorBothGenerations feeds the same throttled GPU once in
// classic names and units and once in DCGM 4.7's, with sentinels in between:
// both come out the same, in the view's units.
func TestGPUAccumulatorBothGenerations(t *testing.T) {
	start := time.Unix(1.8e9, 0)
	before := start.Add(-2 * time.Minute) // the errors query's readings before the window
	blank := 9223372036854775794.0
	type gen struct {
		clock, util, temp, xid, maxClock string
		hz, pct                          float64
	}
	for _, g := range []gen{
		{"DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_XID_ERRORS", "max", 1, 100},
		{"DCGM_FI_DEV_SM_CLOCK_HERTZ", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_GPU_TEMP_CELSIUS", "DCGM_FI_DEV_XID_ERROR", "max", 1e6, 1},
	} {
		t.Run(g.clock, func(t *testing.T) {
			a := NewAccumulator(start)
			l := func(name string) model.Metric { return dcgmLabels(name, "1", "GPU-1", "node-a") }
			a.Add(model.Matrix{
				series(l("DCGM_FI_DEV_CLOCKS_EVENT_REASONS"), start, 0, 0x4, blank, 0x20|0x4, 0),
				// idle at first (a low clock that does not count), busy and throttled after
				series(l(g.clock), start, 210*g.hz, 1980*g.hz, blank, 1089*g.hz, 1500*g.hz),
				series(l(g.util), start, 0*g.pct, 0.98*g.pct, 0.97*g.pct, 0.99*g.pct, 0.96*g.pct),
				series(l(g.temp), start, 61, 80, blank, 88, 86),
				series(l("DCGM_FI_DEV_POWER_USAGE"), start, 90, 690, 700, 0x7ffffff2, 650),
				// the last XID: 79 set before the window (not this incident's), then 48
				series(l(g.xid), before, 79, 79, 79, 79, 48, 48),
				series(withLabel(l("DCGM_EXP_XID_ERRORS_COUNT"), "xid", "94"), start, 0, 1, 1),
				// a volatile DBE count with a driver reload (reset) in the window
				series(l("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"), before, 3, 3, 3, 3, 4, 0, 1),
				series(l("DCGM_FI_DEV_ROW_REMAP_FAILURE"), start, 0, 0),
			})
			a.Add(model.Vector{
				{Metric: withLabel(l(""), "dcgm_field", "seen"), Value: 1980},
				{Metric: withLabel(l(""), "dcgm_field", g.maxClock), Value: 1980},
			})
			sts := a.States()
			if len(sts) != 1 {
				t.Fatalf("GPUs %+v", sts)
			}
			s := sts[0]
			if s.GPU != "1" || s.UUID != "GPU-1" || s.Hostname != "node-a" || s.Device != "nvidia1" || s.Model == "" {
				t.Errorf("labels %+v", s)
			}
			if !s.ClockEventsMeasured || !slices.Equal(s.ClockEvents, []string{"power_cap", "sw_thermal"}) {
				t.Errorf("clock events %v (measured %v)", s.ClockEvents, s.ClockEventsMeasured)
			}
			num := func(what string, p *float64, want float64) {
				t.Helper()
				if p == nil || *p < want-0.01 || *p > want+0.01 {
					t.Errorf("%s = %v, want %v", what, deref(p), want)
				}
			}
			num("SM clock under load", s.SMClockMHz, 1089)
			num("SM clock max", s.SMClockMaxMHz, 1980)
			num("temperature", s.TempC, 88)
			num("power", s.PowerW, 700)
			num("util", s.Util, (0+0.98+0.97+0.99+0.96)/5)
			num("uncorrectable ECC", s.ECCUncorrectable, 2) // 3→4, then reset to 0→1
			num("row remap failure", s.RowRemapFailure, 0)
			if s.NVLinkErrors != nil {
				t.Errorf("NVLink errors %v: not reported by this exporter, so not measured", *s.NVLinkErrors)
			}
			if !slices.Equal(s.XIDs, []int{48, 94}) {
				t.Errorf("XIDs %v, want 48 (changed in the window) and 94 (counted); 79 was set before it", s.XIDs)
			}
		})
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestGPUAccumulatorKeysGPUs: GPUs are told apart by UUID, else by exporter
// and index; the max clock falls back to the highest seen.
func TestGPUAccumulatorKeysGPUs(t *testing.T) {
	start := time.Unix(1.8e9, 0)
	a := NewAccumulator(start)
	noUUID := func(name, gpu, host string) model.Metric {
		m := dcgmLabels(name, gpu, "", host)
		delete(m, "UUID")
		return m
	}
	a.Add(model.Matrix{
		series(noUUID("DCGM_FI_DEV_GPU_TEMP", "0", "node-a"), start, 50),
		series(noUUID("DCGM_FI_DEV_GPU_TEMP", "10", "node-a"), start, 51),
		series(noUUID("DCGM_FI_DEV_GPU_TEMP", "2", "node-a"), start, 52),
		series(noUUID("DCGM_FI_DEV_GPU_TEMP", "0", "node-b"), start, 53),
	})
	a.Add(model.Vector{{Metric: withLabel(noUUID("", "2", "node-a"), "dcgm_field", "seen"), Value: 1755}})
	sts := a.States()
	var got []string
	for _, s := range sts {
		got = append(got, s.Hostname+"/"+s.GPU)
	}
	if !slices.Equal(got, []string{"node-a/0", "node-a/2", "node-a/10", "node-b/0"}) {
		t.Fatalf("GPUs %v", got)
	}
	if m := sts[1].SMClockMaxMHz; m == nil || *m != 1755 {
		t.Fatalf("max clock %v, want the highest seen", deref(m))
	}
	if sts[1].SMClockMHz != nil || sts[1].ClockEventsMeasured {
		t.Fatalf("not reported is not measured: %+v", sts[1])
	}
}

func TestGPUStepQueriesAreConstantAndNameBothGenerations(t *testing.T) {
	step, err := New(Config{Selector: `instance=~"10\\.0\\.0\\.7:[0-9]+"`})
	if err != nil {
		t.Fatal(err)
	}
	qs := step.queries(time.Hour)
	if len(qs) != len(QueryNames) {
		t.Fatalf("%d queries", len(qs))
	}
	all := ""
	for i, q := range qs {
		if q.Name != QueryNames[i] || !strings.Contains(q.Query, `instance=~"10\\.0\\.0\\.7:[0-9]+"`) {
			t.Errorf("query %s: %s", q.Name, q.Query)
		}
		if _, err := parserFor(q.Query); err != nil {
			t.Errorf("query %s does not parse: %v\n%s", q.Name, err, q.Query)
		}
		all += q.Query + "\n"
	}
	for _, n := range []string{"DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_EXP_CLOCK_EVENTS_COUNT",
		"DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_SM_CLOCK_HERTZ", "DCGM_FI_DEV_MAX_SM_CLOCK", "DCGM_FI_DEV_SM_MAX_CLOCK_HERTZ",
		"DCGM_FI_DEV_GPU_TEMP_CELSIUS", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_XID_ERROR", "DCGM_EXP_XID_ERRORS_COUNT",
		"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "[1h]", "[1h5m]", "[1d]"} {
		if !strings.Contains(all, n) {
			t.Errorf("queries lack %s", n)
		}
	}
	for _, bad := range []string{"", "  ", `instance=`, `{instance="a"}`, `instance="a"}) or vector(1`} {
		if _, err := New(Config{Selector: bad}); vocab.Classify(err) != vocab.ReasonBadConfig {
			t.Errorf("selector %q: %v", bad, err)
		}
	}
}

// TestGPUStepFailsOnlyWhenEveryQueryFails: Prometheus answering 503 to every
// query fails the step, with the view saying why; one bad query does not.
func TestGPUStepFailsOnlyWhenEveryQueryFails(t *testing.T) {
	failing := ""
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		if failing == "all" || strings.Contains(r.Form.Get("query"), failing) {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"status":"error","errorType":"unavailable","error":"down"}`))
			return
		}
		_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"matrix","result":[]}}`))
	}))
	defer srv.Close()
	step, _ := New(Config{Selector: `instance=~"h:[0-9]+"`})
	for _, c := range []struct {
		failing string
		fails   bool
	}{{"all", true}, {"label_replace", false}} {
		failing = c.failing
		in := promInput(t, srv.URL)
		res, err := step.Run(context.Background(), in)
		if (err != nil) != c.fails || res == nil {
			t.Fatalf("failing %s: err %v", c.failing, err)
		}
		v := res.Findings[views.FindingGPU].(*views.GPUView)
		if v.Measured || len(res.Artifacts) != 1 || !strings.HasPrefix(res.Summary, "GPU not measured: ") {
			t.Fatalf("failing %s: %+v, summary %q", c.failing, v, res.Summary)
		}
		if c.fails && !strings.Contains(res.Summary, "every DCGM query failed") {
			t.Errorf("summary %q", res.Summary)
		}
		if !c.fails && (len(v.Failed) != 1 || v.Failed[gqClockMax] == "" || !strings.Contains(res.Summary, "no DCGM series matched")) {
			t.Errorf("failed %v, summary %q", v.Failed, res.Summary)
		}
	}
}

func parserFor(q string) (parser.Expr, error) { return parser.NewParser(parser.Options{}).ParseExpr(q) }

// promInput is an Input against url with a local store and a one-hour window.
func promInput(t testing.TB, url string) *vocab.Input { return steptest.PromInput(t, url) }

// TestFailedListSaysOneErrorOnce: queries that failed alike (a Prometheus
// that is down) are named together with their error said once; different
// failures keep their own.
func TestFailedListSaysOneErrorOnce(t *testing.T) {
	refused := `unreachable: Post "http://localhost:9090/api/v1/query": dial tcp 127.0.0.1:9090: connect: connection refused`
	got := FailedList(map[string]string{"gpu_gauges": refused, "gpu_errors": refused, "gpu_clock_max": refused, "gpu_clock_events": "timeout"})
	want := "gpu_clock_events timeout; gpu_clock_max, gpu_errors and gpu_gauges " + refused
	if got != want {
		t.Errorf("FailedList:\n %s\nwant\n %s", got, want)
	}
	if n := strings.Count(got, "connection refused"); n != 1 {
		t.Errorf("the refused error said %d times, want once: %s", n, got)
	}
}
