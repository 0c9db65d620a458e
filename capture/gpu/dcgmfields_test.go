package gpu

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/capture/internal/views"
	"github.com/prometheus/common/model"
)

// dcgmCase is one name of one field, read from raw samples (30 s apart, the
// first one before the window when before is set) and judged.
type dcgmCase struct {
	name    string
	labels  map[string]string // extra labels (clock_event, xid)
	before  bool              // the first sample is a reading from before the window
	samples []float64
	want    func(views.GPUState) (got any, ok bool)
	line    string // the evidence line that must show the reading and name the series
}

// num checks a reading in the view's unit.
func num(p func(views.GPUState) *float64, want float64) func(views.GPUState) (any, bool) {
	return func(s views.GPUState) (any, bool) {
		v := p(s)
		return deref(v), v != nil && math.Abs(*v-want) < 1e-9*max(1, want)
	}
}

// dcgmCases are every name in the table, both generations (and the
// aliases), with readings in each name's own unit and the values they must
// come out as.
var dcgmCases = []dcgmCase{
	{name: "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", samples: []float64{0, 0x20}, want: events("sw_thermal"), line: "sw_thermal: software thermal slowdown"},
	{name: "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", samples: []float64{0x40, 0}, want: events("hw_thermal"), line: "hw_thermal: hardware thermal slowdown"},
	{name: "DCGM_EXP_CLOCK_EVENTS_COUNT", labels: map[string]string{"clock_event": "hw_power_brake"}, samples: []float64{0, 2},
		want: events("hw_power_brake"), line: "hw_power_brake: hardware power brake"},
	{name: "DCGM_FI_DEV_SM_CLOCK", samples: []float64{1500, 1089}, want: num(func(s views.GPUState) *float64 { return s.SMClockMHz }, 1089), line: "SM 1089 MHz"},
	{name: "DCGM_FI_DEV_SM_CLOCK_HERTZ", samples: []float64{1500e6, 1089e6}, want: num(func(s views.GPUState) *float64 { return s.SMClockMHz }, 1089), line: "SM 1089 MHz"},
	{name: "DCGM_FI_DEV_GPU_TEMP", samples: []float64{80, 88}, want: num(func(s views.GPUState) *float64 { return s.TempC }, 88), line: "88 °C"},
	{name: "DCGM_FI_DEV_GPU_TEMP_CELSIUS", samples: []float64{88, 80}, want: num(func(s views.GPUState) *float64 { return s.TempC }, 88), line: "88 °C"},
	{name: "DCGM_FI_DEV_POWER_USAGE", samples: []float64{590.5, 610.25}, want: num(func(s views.GPUState) *float64 { return s.PowerW }, 610.25), line: "610 W"},
	{name: "DCGM_FI_DEV_BOARD_POWER_WATTS", samples: []float64{610.25, 590.5}, want: num(func(s views.GPUState) *float64 { return s.PowerW }, 610.25), line: "610 W"},
	{name: "DCGM_FI_DEV_GPU_UTIL", samples: []float64{96, 98}, want: num(func(s views.GPUState) *float64 { return s.Util }, 0.97), line: "util 97%"},
	// Field 203 under its new name: DCGM 4.6 still writes an integer percent;
	// the simulator (after GPU.md) a ratio.
	{name: "DCGM_FI_DEV_GPU_UTIL_RATIO", samples: []float64{96, 98}, want: num(func(s views.GPUState) *float64 { return s.Util }, 0.97), line: "util 97%"},
	{name: "DCGM_FI_DEV_GPU_UTIL_RATIO", samples: []float64{0.96, 0.98}, want: num(func(s views.GPUState) *float64 { return s.Util }, 0.97), line: "util 97%"},
	{name: "DCGM_FI_DEV_GPU_UTIL_RATIO", samples: []float64{1, 1}, want: num(func(s views.GPUState) *float64 { return s.Util }, 0.01), line: "util 1%"},
	{name: "DCGM_FI_PROF_GR_ENGINE_ACTIVE", samples: []float64{0.96, 0.98}, want: num(func(s views.GPUState) *float64 { return s.Util }, 0.97), line: "util 97%"},
	{name: "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", samples: []float64{0.96, 0.98}, want: num(func(s views.GPUState) *float64 { return s.Util }, 0.97), line: "util 97%"},
	{name: "DCGM_FI_DEV_XID_ERRORS", before: true, samples: []float64{0, 0, 79}, want: xids(79), line: "XID 79 in the window: the GPU has fallen off the bus"},
	{name: "DCGM_FI_DEV_XID_ERROR", before: true, samples: []float64{0, 79, 79}, want: xids(79), line: "XID 79 in the window: the GPU has fallen off the bus"},
	{name: "DCGM_EXP_XID_ERRORS_COUNT", labels: map[string]string{"xid": "48"}, samples: []float64{0, 1}, want: xids(48), line: "XID 48 in the window: double-bit ECC error"},
	{name: "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", before: true, samples: []float64{3, 3, 5}, want: num(func(s views.GPUState) *float64 { return s.ECCDBE }, 2),
		line: "2 uncorrectable ECC errors in the window (double-bit ECC +2"},
	{name: "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", before: true, samples: []float64{4, 4, 5},
		want: num(func(s views.GPUState) *float64 { return s.RemappedRowsUncorrectable }, 1), line: "1 uncorrectable ECC error in the window (uncorrectable remapped rows +1"},
	{name: "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL", before: true, samples: []float64{4, 5, 6},
		want: num(func(s views.GPUState) *float64 { return s.RemappedRowsUncorrectable }, 2), line: "2 uncorrectable ECC errors in the window (uncorrectable remapped rows +2"},
	{name: "DCGM_FI_DEV_ROW_REMAP_FAILURE", samples: []float64{0, 1}, want: num(func(s views.GPUState) *float64 { return s.RowRemapFailure }, 1), line: "row remapping failed"},
	{name: "DCGM_FI_DEV_ROW_REMAP_FAILED", samples: []float64{1, 1}, want: num(func(s views.GPUState) *float64 { return s.RowRemapFailure }, 1), line: "row remapping failed"},
	{name: "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", before: true, samples: []float64{10, 12, 13}, want: nvlink(3), line: "3 NVLink errors"},
	{name: "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_TOTAL", before: true, samples: []float64{10, 12, 13}, want: nvlink(3), line: "3 NVLink errors"},
	{name: "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", before: true, samples: []float64{0, 0, 1}, want: nvlink(1), line: "1 NVLink error "},
	{name: "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_TOTAL", before: true, samples: []float64{0, 0, 1}, want: nvlink(1), line: "1 NVLink error "},
	{name: "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", before: true, samples: []float64{7, 9, 2}, want: nvlink(4), line: "4 NVLink errors"},
	{name: "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_TOTAL", before: true, samples: []float64{7, 9, 2}, want: nvlink(4), line: "4 NVLink errors"},
	{name: "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", before: true, samples: []float64{1, 2}, want: nvlink(1), line: "1 NVLink error "},
	{name: "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_TOTAL", before: true, samples: []float64{1, 2}, want: nvlink(1), line: "1 NVLink error "},
}

func events(want ...string) func(views.GPUState) (any, bool) {
	return func(s views.GPUState) (any, bool) {
		return s.ClockEvents, s.ClockEventsMeasured && slices.Equal(s.ClockEvents, want)
	}
}

func xids(want ...int) func(views.GPUState) (any, bool) {
	return func(s views.GPUState) (any, bool) { return s.XIDs, slices.Equal(s.XIDs, want) }
}

func nvlink(want float64) func(views.GPUState) (any, bool) {
	return num(func(s views.GPUState) *float64 { return s.NVLinkErrors }, want)
}

// TestDCGMFieldsEveryNameBothGenerations reads each name of the table from
// raw samples and judges the GPU: the reading comes out in the view's unit,
// and the evidence line that shows it names the series it was read from.
// Every GPU but the row-remap ones is also given a row-remap failure, so
// that it is degraded and its figures reach the evidence.
func TestDCGMFieldsEveryNameBothGenerations(t *testing.T) {
	start := time.Unix(1.8e9, 0)
	covered := map[string]bool{}
	for _, c := range dcgmCases {
		covered[c.name] = true
		t.Run(fmt.Sprintf("%s %v", c.name, c.samples), func(t *testing.T) {
			m := dcgmLabels(c.name, "1", "GPU-1", "node-a")
			for k, v := range c.labels {
				m = withLabel(m, k, v)
			}
			t0 := start
			if c.before {
				t0 = start.Add(-30 * time.Second)
			}
			a := NewAccumulator(start)
			a.Add(model.Matrix{series(m, t0, c.samples...)})
			if c.line != "row remapping failed" {
				a.Add(model.Matrix{series(dcgmLabels("DCGM_FI_DEV_ROW_REMAP_FAILED", "1", "GPU-1", "node-a"), start, 1)})
			}
			sts := a.States()
			if len(sts) != 1 {
				t.Fatalf("GPUs %+v", sts)
			}
			s := sts[0]
			if got, ok := c.want(s); !ok {
				t.Errorf("reading %v", got)
			}
			_, lines := Check(s, DefaultClockRatio, false)
			var line string
			for _, l := range lines {
				if strings.Contains(l, c.line) {
					line = l
				}
			}
			if line == "" || !strings.Contains(line, c.name) {
				t.Errorf("no evidence line shows %q and names %s:\n%s", c.line, c.name, strings.Join(lines, "\n"))
			}
		})
	}
	for name := range dcgmByName {
		if !covered[name] && dcgmByName[name].field.proc != procClockMax {
			t.Errorf("%s: in the table, in no case here", name)
		}
	}
}

// TestDCGMMaxClockBothGenerations: the GPU's max SM clock is read under
// either generation's field (113 in MHz, 1608 in Hz), the Hz one scaled in
// the query after its 64-bit blanks are dropped, and the evidence names it.
func TestDCGMMaxClockBothGenerations(t *testing.T) {
	step, err := New(Config{Selector: `instance=~"node-a:[0-9]+"`})
	if err != nil {
		t.Fatal(err)
	}
	q := step.queries(time.Hour)[3].Query
	for _, c := range []struct {
		name, clock, inQuery string
		clockVal             float64
	}{
		{"DCGM_FI_DEV_MAX_SM_CLOCK", "DCGM_FI_DEV_SM_CLOCK", `max_over_time(DCGM_FI_DEV_MAX_SM_CLOCK{instance=~"node-a:[0-9]+"}[1d]) < 2147483632), "dcgm_field", "max"`, 1089},
		{"DCGM_FI_DEV_SM_MAX_CLOCK_HERTZ", "DCGM_FI_DEV_SM_CLOCK_HERTZ", `max_over_time(DCGM_FI_DEV_SM_MAX_CLOCK_HERTZ{instance=~"node-a:[0-9]+"}[1d]) < 140737488355328) * 1e-06, "dcgm_field", "max"`, 1089e6},
	} {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(q, c.inQuery) || !strings.Contains(q, `"dcgm_series", "`+c.name+`"`) {
				t.Errorf("max clock query lacks %s as %q:\n%s", c.name, c.inQuery, q)
			}
			start := time.Unix(1.8e9, 0)
			a := NewAccumulator(start)
			l := func(name string) model.Metric { return dcgmLabels(name, "0", "GPU-0", "node-a") }
			a.Add(model.Matrix{series(l(c.clock), start, c.clockVal), series(l("DCGM_FI_DEV_CLOCKS_EVENT_REASONS"), start, 0x20)})
			a.Add(model.Vector{{Metric: withLabel(withLabel(l(""), "dcgm_field", "max"), "dcgm_series", c.name), Value: 1980}})
			s := a.States()[0]
			_, lines := Check(s, DefaultClockRatio, true)
			if len(lines) == 0 || !strings.Contains(lines[0], "SM 1089/1980 MHz (55%)") || !strings.Contains(lines[0], c.name) || !strings.Contains(lines[0], c.clock) {
				t.Errorf("evidence %q: want SM 1089/1980 MHz read from %s and %s", lines, c.clock, c.name)
			}
		})
	}
}

// TestGPUQueriesNameOnlyTheTable: every DCGM name in the step's queries is a
// name of the table, and every name of the table is in exactly one query.
func TestGPUQueriesNameOnlyTheTable(t *testing.T) {
	step, _ := New(Config{Selector: `job="dcgm"`})
	seen := map[string]int{}
	for _, q := range step.queries(time.Hour) {
		names := map[string]bool{}
		for _, tok := range strings.FieldsFunc(q.Query, func(r rune) bool { return !(r == '_' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') }) {
			if strings.HasPrefix(tok, "DCGM_") {
				names[tok] = true
			}
		}
		for n := range names {
			if _, ok := dcgmByName[n]; !ok {
				t.Errorf("query %s names %s, which is not in the table", q.Name, n)
			}
			seen[n]++
		}
	}
	for n, f := range dcgmByName {
		want := 1
		if f.field.proc == procClock { // read raw, and as the highest seen
			want = 2
		}
		if seen[n] != want {
			t.Errorf("%s in %d queries, want %d", n, seen[n], want)
		}
	}
}

func TestDCGMPercentOrRatio(t *testing.T) {
	for _, c := range []struct {
		name string
		vals []float64
		want float64
	}{
		{"DCGM 4.6's integer percent", []float64{0, 37, 100}, 0.01},
		{"a ratio", []float64{0, 0.37, 1}, 1},
		{"an idle or near-idle percent", []float64{0, 1, 1}, 0.01},
		{"all zero reads the same either way", []float64{0, 0}, 0.01},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := dcgmPercentOrRatio(c.vals); got != c.want {
				t.Errorf("%v: scale %v, want %v", c.vals, got, c.want)
			}
		})
	}
}

func TestDCGMTableRejectsADuplicateName(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "DCGM_FI_DEV_GPU_TEMP twice") {
			t.Errorf("recovered %v", r)
		}
	}()
	f := FieldByID(150)
	indexDCGM([]DCGMField{f, {Classic: "DCGM_FI_DEV_GPU_TEMP", Current: "X"}})
}
