package triage

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/capture/gpu"
	"github.com/autocapture/autocapture/capture/internal/views"
	"github.com/autocapture/autocapture/vocab"
	"github.com/prometheus/common/model"
)

func f64(v float64) *float64 { return &v }

// h100 is one busy H100 at full clock, cool, with nothing reported.
func h100(gpu string) views.GPUState {
	return views.GPUState{GPU: gpu, UUID: "GPU-" + gpu, Hostname: "node-a", Model: "NVIDIA H100 80GB HBM3",
		ClockEventsMeasured: true, SMClockMHz: f64(1980), SMClockMaxMHz: f64(1980), TempC: f64(64), PowerW: f64(520), Util: f64(0.9)}
}

func gpuView(gs ...views.GPUState) *views.GPUView {
	return &views.GPUView{Selector: `instance=~"node-a:[0-9]+"`, Window: 3600, GPUs: gs, Measured: len(gs) > 0}
}

// slowITL is an instance whose tokens are slow at a batch that was fine (narrow).
var slowITL = with(map[string]float64{vocab.SigITLP99: 0.45, vocab.SigRunning: 24})

// wideSlowITL is decode-bound by itself: slow tokens in a wide batch.
var wideSlowITL = with(map[string]float64{vocab.SigITLP99: 0.3, vocab.SigRunning: 240})

func TestGPUDegradedRule(t *testing.T) {
	throttled := func(events []string, clock float64) views.GPUState {
		g := h100("1")
		g.ClockEvents, g.SMClockMHz, g.TempC = events, f64(clock), f64(88)
		return g
	}
	idle := h100("1")
	idle.ClockEvents, idle.SMClockMHz, idle.Util = []string{"gpu_idle"}, f64(345), f64(0.01)
	noReasons := h100("1")
	noReasons.ClockEventsMeasured, noReasons.SMClockMHz = false, f64(1200)
	xid := h100("1")
	xid.XIDs = []int{79}
	ecc := h100("1")
	ecc.ECCUncorrectable = f64(3)
	remap := h100("1")
	remap.RowRemapFailure = f64(1)
	cases := []struct {
		name         string
		sig          vocab.Signals
		gpu          *views.GPUView
		want         string
		contributing []string
		evidence     []string
	}{
		{"sw_thermal slows tokens", slowITL, gpuView(h100("0"), throttled([]string{"sw_thermal"}, 1089)), vocab.VerdictGPUDegraded, nil,
			[]string{"GPU 1 on node-a (NVIDIA H100 80GB HBM3): sw_thermal: software thermal slowdown, the GPU is too hot; SM 1089/1980 MHz (55%), 88 °C",
				`a profile would only show "everything slow"`}},
		{"hw_slowdown at full clock still counts", slowITL, gpuView(throttled([]string{"hw_slowdown"}, 1980)), vocab.VerdictGPUDegraded, nil,
			[]string{"hw_slowdown: hardware slowdown"}},
		{"power_cap at full load near max is routine", normal, gpuView(throttled([]string{"power_cap"}, 1755)), vocab.VerdictHealthy, nil,
			[]string{"GPU: 1 measured, no abnormal throttling"}},
		{"power_cap with the clock well below max is not", slowITL, gpuView(throttled([]string{"power_cap"}, 1300)), vocab.VerdictGPUDegraded, nil,
			[]string{"power_cap: software power cap", "SM 1300/1980 MHz (66%)"}},
		{"an idle GPU's low clock is not degraded", normal, gpuView(idle), vocab.VerdictHealthy, nil, nil},
		{"a low clock under load with no reason measured", slowITL, gpuView(noReasons), vocab.VerdictGPUDegraded, nil,
			[]string{"SM clock below 80% of its max under load (clock event reasons not measured"}},
		{"an XID is named with its meaning", normal, gpuView(xid), vocab.VerdictGPUDegraded, nil,
			[]string{"GPU 1 on node-a (NVIDIA H100 80GB HBM3): XID 79 in the window: the GPU has fallen off the bus"}},
		{"uncorrectable ECC", normal, gpuView(ecc), vocab.VerdictGPUDegraded, nil, []string{"3 uncorrectable ECC errors"}},
		{"row-remap failure", normal, gpuView(remap), vocab.VerdictGPUDegraded, nil, []string{"row remapping failed"}},
		// Precedence: below the load causes, above decode-bound.
		{"a throttled GPU under a deep queue is overload first", with(map[string]float64{vocab.SigQueueDepth: 42, vocab.SigRunning: 32,
			vocab.SigQueueTimeMean: 30, vocab.SigPrefillMean: 0.1, vocab.SigTTFTP99: 40}), gpuView(throttled([]string{"hw_thermal"}, 990)),
			vocab.VerdictOverload, []string{vocab.VerdictGPUDegraded}, []string{"queue 42 waiting", "hw_thermal: hardware thermal slowdown"}},
		{"a throttled GPU in a wide batch is gpu-degraded, decode-bound contributing", wideSlowITL, gpuView(throttled([]string{"sw_thermal"}, 1089)),
			vocab.VerdictGPUDegraded, []string{vocab.VerdictDecodeBound}, []string{"sw_thermal"}},
		{"a healthy GPU leaves decode-bound alone", wideSlowITL, gpuView(h100("0")), vocab.VerdictDecodeBound, nil, []string{"GPU: 1 measured"}},
		// Not measured is said, never healthy.
		{"no DCGM series: unexplained, GPU not measured", slowITL, gpuView(), vocab.VerdictUnexplained, nil,
			[]string{`GPU not measured: no DCGM series matched {instance=~"node-a:[0-9]+"}`}},
		{"no gpu step", slowITL, nil, vocab.VerdictUnexplained, nil, []string{"GPU not measured: no gpu step result"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, _ := diagnose(c.sig, nil, Thresholds{}, false, beyond{gpu: c.gpu})
			all := checkVerdict(t, v, c.want, c.contributing, c.evidence)
			if c.gpu == nil || !c.gpu.Measured {
				if strings.Contains(all, "GPU: ") {
					t.Errorf("an unmeasured GPU reads as fine:\n%s", all)
				}
			}
			if v.ID == vocab.VerdictGPUDegraded && !slices.Equal(v.Advice, advice[vocab.VerdictGPUDegraded]) {
				t.Errorf("advice %q", v.Advice)
			}
		})
	}
}

func TestGPUClockRatioThreshold(t *testing.T) {
	if _, err := New(Config{Thresholds: Thresholds{GPUClockRatio: 1.2}}); vocab.Classify(err) != vocab.ReasonBadConfig {
		t.Fatalf("gpu_clock_ratio 1.2: %v", err)
	}
	g := h100("1")
	g.ClockEvents, g.SMClockMHz = []string{"power_cap"}, f64(1700) // 86% of max
	for _, c := range []struct {
		ratio float64
		want  string
	}{{0, vocab.VerdictHealthy}, {0.9, vocab.VerdictGPUDegraded}} {
		v, _ := diagnose(normal, nil, Thresholds{GPUClockRatio: c.ratio}, false, beyond{gpu: gpuView(g)})
		if v.ID != c.want {
			t.Errorf("ratio %v: %s, want %s", c.ratio, v.ID, c.want)
		}
	}
}

// TestGPUViewThroughTriageRunAsJSON: a resumed run's prior results hold the
// GPUView as JSON decoded into maps; triage reads it the same.
func TestGPUViewThroughTriageRunAsJSON(t *testing.T) {
	g := h100("3")
	g.ClockEvents, g.SMClockMHz, g.TempC, g.XIDs = []string{"gpu_idle", "sw_thermal"}, f64(1089), f64(88), []int{48}
	b, err := json.Marshal(gpuView(h100("0"), g))
	if err != nil {
		t.Fatal(err)
	}
	var decoded map[string]any
	if err := json.Unmarshal(b, &decoded); err != nil {
		t.Fatal(err)
	}
	tri, _ := New(Config{})
	prior := map[string]*vocab.Result{
		"snapshot": {Signals: slowITL, Findings: map[string]any{"source": vocab.SourcePromQL}},
		"gpu":      {Findings: map[string]any{views.FindingGPU: decoded}},
	}
	out, err := tri.Run(context.Background(), &vocab.Input{Env: &vocab.Env{}, Prior: prior})
	if err != nil {
		t.Fatal(err)
	}
	v := out.Verdict
	all := strings.Join(v.Evidence, "\n")
	if v.ID != vocab.VerdictGPUDegraded || !strings.Contains(all, "GPU 3 on node-a") || !strings.Contains(all, "XID 48 in the window: double-bit ECC error") ||
		strings.Contains(all, "GPU 0 on") {
		t.Fatalf("verdict %s\n%s", v.ID, all)
	}
	if !strings.HasPrefix(out.Summary, "gpu-degraded: GPU 3 on node-a (NVIDIA H100 80GB HBM3): sw_thermal") {
		t.Errorf("summary %q", out.Summary)
	}
}

// TestRowRemapFailureBothGenerations: a GPU failing row remapping, read from
// raw samples under the classic names and under the 4.x ones, is the same
// verdict with the same scope (gpu-degraded on this instance alone, its
// peers fine), and each evidence line names the series it read.
func TestRowRemapFailureBothGenerations(t *testing.T) {
	start := time.Unix(1.8e9, 0)
	type gen struct{ rows, failed, power, temp string }
	var got []*vocab.Verdict
	for _, g := range []gen{
		{"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP"},
		{"DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL", "DCGM_FI_DEV_ROW_REMAP_FAILED", "DCGM_FI_DEV_BOARD_POWER_WATTS", "DCGM_FI_DEV_GPU_TEMP_CELSIUS"},
	} {
		t.Run(g.failed, func(t *testing.T) {
			a := gpu.NewAccumulator(start)
			l := func(name, gpu string) model.Metric { return dcgmLabels(name, gpu, "GPU-"+gpu, "node-a") }
			before := start.Add(-30 * time.Second)
			for _, gpu := range []string{"0", "1"} {
				rows, failed := []float64{4, 4, 4}, []float64{0, 0}
				if gpu == "1" {
					rows, failed = []float64{4, 4, 5}, []float64{0, 1}
				}
				a.Add(model.Matrix{series(l(g.rows, gpu), before, rows...), series(l(g.failed, gpu), start, failed...),
					series(l(g.power, gpu), start, 401.5, 420.25), series(l(g.temp, gpu), start, 61, 62)})
			}
			view := &views.GPUView{Selector: `instance=~"node-a:[0-9]+"`, Window: 600, GPUs: a.States(), Measured: true}
			v, _ := diagnose(slowITL, nil, Thresholds{}, false, beyond{gpu: view, peers: fleet(vocab.SigITLP99, 0.45, 0.03, 0.03, 0.04)})
			all := checkVerdict(t, v, vocab.VerdictGPUDegraded, []string{vocab.FactorSingleInstance}, []string{
				"GPU 1 on node-a (NVIDIA H100 80GB HBM3): row remapping failed (" + g.failed + "): the memory cannot be repaired",
				"GPU 1 on node-a (NVIDIA H100 80GB HBM3): 1 uncorrectable ECC error in the window (uncorrectable remapped rows +1 (" + g.rows + "))",
				"GPU 1 on node-a (NVIDIA H100 80GB HBM3): 62 °C, 420 W (" + g.temp + ", " + g.power + ")",
				"only this instance: ITL p99",
			})
			if v.Scope != vocab.ScopeSingle || strings.Contains(all, "GPU 0 on") {
				t.Errorf("scope %q; evidence:\n%s", v.Scope, all)
			}
			got = append(got, v)
		})
	}
	if len(got) == 2 && (got[0].ID != got[1].ID || got[0].Scope != got[1].Scope || len(got[0].Evidence) != len(got[1].Evidence)) {
		t.Errorf("the generations disagree: %s/%s %d lines vs %s/%s %d lines", got[0].ID, got[0].Scope, len(got[0].Evidence), got[1].ID, got[1].Scope, len(got[1].Evidence))
	}
}

// The gpu family's test helpers, for the DCGM series these tests feed its accumulator.

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
