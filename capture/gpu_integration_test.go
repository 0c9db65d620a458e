package capture_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/capture/internal/views"
	"github.com/autocapture/autocapture/capture/triage"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vllmsim"
	"github.com/autocapture/autocapture/vocab"
)

// fakeGPU is one GPU as a DCGM exporter shows it; its numbers may move with
// the time since the exporter started.
type fakeGPU struct {
	reasons, clockMHz, maxMHz, util, temp, power float64
	xid                                          func(since time.Duration) float64
}

// dcgmExporter serves a DCGM exporter's /metrics for host's GPUs, on addr
// (127.0.0.1 or 127.0.0.2: two hosts on loopback), in the classic names and
// units or, with dcgm47, in the exporter-4.9 / DCGM-4.7 ones (Hz, ratio).
// Labels as GPU.md's example; ECC DBE reports DCGM's NOT_SUPPORTED sentinel.
func dcgmExporter(tb testing.TB, addr, host string, dcgm47 bool, gpus []fakeGPU) string {
	tb.Helper()
	ln, err := net.Listen("tcp", addr+":0")
	if err != nil {
		tb.Fatal(err)
	}
	began := time.Now()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		since := time.Since(began)
		var b strings.Builder
		metric := func(name string, val func(g fakeGPU) float64) {
			fmt.Fprintf(&b, "# TYPE %s gauge\n", name)
			for i, g := range gpus {
				fmt.Fprintf(&b, "%s{gpu=\"%d\",UUID=\"GPU-%s-%d\",pci_bus_id=\"00000000:%02X:00.0\",device=\"nvidia%d\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=%q,DCGM_FI_DRIVER_VERSION=\"550.54.15\"} %s\n",
					name, i, host, i, 0x18+i, i, host, fmt.Sprint(val(g)))
			}
		}
		hz, util, clk, maxClk, temp, xid := 1.0, 1.0, "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MAX_SM_CLOCK", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_XID_ERRORS"
		utilName, power := "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE"
		if dcgm47 {
			hz, util, clk, maxClk, temp, xid = 1e6, 0.01, "DCGM_FI_DEV_SM_CLOCK_HERTZ", "DCGM_FI_DEV_SM_MAX_CLOCK_HERTZ", "DCGM_FI_DEV_GPU_TEMP_CELSIUS", "DCGM_FI_DEV_XID_ERROR"
			utilName, power = "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", "DCGM_FI_DEV_BOARD_POWER_WATTS"
		}
		metric("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", func(g fakeGPU) float64 { return g.reasons })
		metric(clk, func(g fakeGPU) float64 { return g.clockMHz * hz })
		metric(maxClk, func(g fakeGPU) float64 { return g.maxMHz * hz })
		metric(utilName, func(g fakeGPU) float64 { return g.util * 100 * util })
		metric(temp, func(g fakeGPU) float64 { return g.temp })
		metric(power, func(g fakeGPU) float64 { return g.power })
		metric(xid, func(g fakeGPU) float64 {
			if g.xid == nil {
				return 0
			}
			return g.xid(since)
		})
		metric("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", func(fakeGPU) float64 { return 9223372036854775794 })
		metric("DCGM_FI_DEV_ROW_REMAP_FAILURE", func(fakeGPU) float64 { return 0 })
		_, _ = w.Write([]byte(b.String()))
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	tb.Cleanup(srv.Close)
	return ln.Addr().String()
}

// simDCGM serves a vllmsim instance's DCGM surface on addr, in the 4.9
// names (DCGM 4.6+: _HERTZ, _BOARD_POWER_WATTS, _ROW_REMAP_*), its node
// host, 2 GPUs, no load, in real time; it returns the sim and the address.
func simDCGM(tb testing.TB, addr, host string) (*vllmsim.Sim, string) {
	tb.Helper()
	sim, err := vllmsim.New(vllmsim.Options{Load: vllmsim.NoLoad, TensorParallel: 2, Start: time.Now(),
		DCGM: vllmsim.DCGMOptions{Names: vllmsim.DCGMNames49, Hostname: host}})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sim.Run(ctx) }()
	tb.Cleanup(func() { cancel(); <-done })
	ln, err := net.Listen("tcp", addr+":0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(sim.DCGMHandler())
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	tb.Cleanup(srv.Close)
	return sim, ln.Addr().String()
}

// countingTransport counts the requests that reach Prometheus.
type countingTransport struct{ n atomic.Int64 }

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultTransport.RoundTrip(r)
}

// gpuFleet is three hosts' DCGM exporters under one real Prometheus: node-a
// (127.0.0.1) with 2 GPUs in classic names, GPU 1 thermally throttled;
// node-b (127.0.0.2) with 4 GPUs in DCGM 4.7 names, GPU 2 reporting XID 79
// from 3 s after the exporter started; node-c (127.0.0.4), the simulator's
// DCGM surface with --dcgm-names 4.9 and 2 GPUs (TP 2, no load), GPU 1
// remapping a row for an uncorrectable error and failing to remap another
// once Prometheus has scraped it twice. Power capping at full load on node-a's GPU 0 is
// routine.
func gpuFleet(tb testing.TB) (prom *testenv.Prometheus, exporters []string) {
	tb.Helper()
	cool := fakeGPU{reasons: 0x4, clockMHz: 1965, maxMHz: 1980, util: 0.95, temp: 63, power: 699}
	hot := fakeGPU{reasons: 0x20 | 0x4, clockMHz: 1089, maxMHz: 1980, util: 0.97, temp: 88, power: 610}
	xid := fakeGPU{clockMHz: 1980, maxMHz: 1980, util: 0.9, temp: 60, power: 500, xid: func(since time.Duration) float64 {
		if since > 3*time.Second {
			return 79
		}
		return 0
	}}
	b := fakeGPU{clockMHz: 1980, maxMHz: 1980, util: 0.9, temp: 58, power: 480}
	sim, nodeC := simDCGM(tb, "127.0.0.4", "node-c")
	exporters = []string{
		dcgmExporter(tb, "127.0.0.1", "node-a", false, []fakeGPU{cool, hot}),
		dcgmExporter(tb, "127.0.0.2", "node-b", true, []fakeGPU{b, b, xid, b}),
		nodeC,
	}
	prom = testenv.StartPrometheus(tb, testenv.PrometheusOptions{ScrapeTargets: exporters})
	for _, e := range exporters {
		prom.WaitUp(tb, e, 30*time.Second)
	}
	// node-c's row remap once Prometheus has read its counter at 0, so the
	// counter's rise falls in the window.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		if s := prom.Query(tb, `count_over_time(DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL{gpu="1"}[1m])`); len(s) == 1 && s[0].Value >= 2 {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatal("prometheus has not scraped node-c twice")
		}
	}
	if err := sim.SetGPUFaults([]vllmsim.GPUFault{{Kind: vllmsim.GPUFaultRowRemap, GPU: 1, Rows: 1},
		{Kind: vllmsim.GPUFaultRowRemap, GPU: 1, Failed: true}}); err != nil {
		tb.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		power := prom.Query(tb, `min(count_over_time({__name__=~"DCGM_FI_DEV_POWER_USAGE|DCGM_FI_DEV_BOARD_POWER_WATTS"}[1m]))`)
		failed := prom.Query(tb, `sum(sum_over_time(DCGM_FI_DEV_ROW_REMAP_FAILED[1m]))`)
		if len(power) == 1 && power[0].Value >= 6 && len(failed) == 1 && failed[0].Value >= 2 {
			return prom, exporters // node-b's XID and node-c's row remap have turned up
		}
		if time.Now().After(deadline) {
			tb.Fatal("prometheus has fewer than 6 scrapes of the exporters")
		}
	}
}

// gpuStepFor plans the shipped vllm-high-itl playbook for an alert on a vLLM
// instance of host and returns its gpu step, its selector rendered from the
// preset's default mapping.
func gpuStepFor(tb testing.TB, host string) vocab.Step {
	tb.Helper()
	set, err := playbooks.Load(playbooks.Shipped, zap.NewNop())
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Now()
	alert := template.Alert{Status: "firing", StartsAt: now,
		Labels: template.KV{"alertname": "VLLMHighITL", "instance": host + ":8000", "model_name": "m", "severity": "page"}}
	plans, err := set.Plan(alert, vocab.Window{Start: now.Add(-10 * time.Minute), End: now})
	if err != nil || len(plans) != 1 {
		tb.Fatalf("plans %v, %v", plans, err)
	}
	for _, ps := range plans[0].Steps {
		if ps.ID == "gpu" {
			if ps.RenderErr != nil {
				tb.Fatal(ps.RenderErr)
			}
			return ps.Step
		}
	}
	tb.Fatal("the shipped playbook has no gpu step")
	return nil
}

func gpuEnv(tb testing.TB, promURL string) (*vocab.Env, *countingTransport) {
	tb.Helper()
	store, err := storage.NewLocal(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	ct := &countingTransport{}
	return &vocab.Env{Store: store, Prometheus: &vocab.Endpoint{URL: promURL, Timeout: 10 * time.Second,
		Client: &http.Client{Transport: ct, Timeout: 10 * time.Second}}}, ct
}

// TestGPUStepAgainstRealPrometheus: the shipped mapping selects only the
// instance's host's GPUs, in both DCGM generations, with the same number of
// queries for 2 GPUs and for 4; triage names the thermal throttle, the XID
// and, under the 4.9 names from the simulator, the row-remap failure and the
// uncorrectable remapped row with the series read and the board's watts; a
// host with no exporter is "GPU not measured".
func TestGPUStepAgainstRealPrometheus(t *testing.T) {
	t.Parallel() // waits on real time and a Prometheus of its own
	prom, _ := gpuFleet(t)
	slow := vocab.Signals{vocab.SigQueueDepth: 0, vocab.SigRunning: 24, vocab.SigKVUsage: 0.2,
		vocab.SigPromptTokens: 300, vocab.SigITLP99: 0.45, vocab.SigTTFTP99: 0.4}
	for _, c := range []struct {
		host      string
		gpus      int
		hostname  string
		selector  string
		verdict   string
		evidence  string
		absent    []string // another host's GPU, or a routine power cap
		measured  bool
		summaryOf string
		together  [][]string // more evidence: each group in one line
		ecc       bool       // the exporter reports an uncorrectable-error counter (else only a sentinel)
	}{
		{"127.0.0.1", 2, "node-a", `instance=~"127\\.0\\.0\\.1:[0-9]+"`, vocab.VerdictGPUDegraded,
			"GPU 1 on node-a (NVIDIA H100 80GB HBM3): power_cap: software power cap: the GPU draws its power limit and lowers its clocks to stay under it; sw_thermal: software thermal slowdown, the GPU is too hot; SM 1089/1980 MHz (55%), 88 °C, 610 W",
			[]string{"XID", "GPU 0 on", "node-b"}, true, "2 GPUs on node-a: GPU 1 power_cap, sw_thermal, SM 1089/1980 MHz (55%), 88 °C", nil, false},
		{"127.0.0.2", 4, "node-b", `instance=~"127\\.0\\.0\\.2:[0-9]+"`, vocab.VerdictGPUDegraded,
			"GPU 2 on node-b (NVIDIA H100 80GB HBM3): XID 79 in the window: the GPU has fallen off the bus",
			[]string{"sw_thermal", "node-a", "GPU 0 on", "GPU 1 on", "GPU 3 on"}, true, "4 GPUs on node-b: GPU 2 XID 79", nil, false},
		{"127.0.0.3", 0, "", `instance=~"127\\.0\\.0\\.3:[0-9]+"`, vocab.VerdictUnexplained,
			`GPU not measured: no DCGM series matched {instance=~"127\\.0\\.0\\.3:[0-9]+"}`, []string{"node-"}, false, "GPU not measured", nil, false},
		{"127.0.0.4", 2, "node-c", `instance=~"127\\.0\\.0\\.4:[0-9]+"`, vocab.VerdictGPUDegraded,
			"GPU 1 on node-c (NVIDIA H100 80GB HBM3): row remapping failed (DCGM_FI_DEV_ROW_REMAP_FAILED): the memory cannot be repaired, an RMA candidate",
			[]string{"GPU 0 on", "node-a", "node-b", "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_POWER_USAGE"}, true,
			"2 GPUs on node-c: GPU 1 1 uncorrectable ECC, row remap failure",
			[][]string{
				{"GPU 1 on node-c", "1 uncorrectable ECC error in the window (uncorrectable remapped rows +1 (DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL))"},
				{"GPU 1 on node-c", " 70 W", "DCGM_FI_DEV_BOARD_POWER_WATTS"},
			}, true},
	} {
		t.Run(c.host, func(t *testing.T) {
			env, ct := gpuEnv(t, prom.URL)
			now := time.Now()
			in := &vocab.Input{RunID: "gpu-" + c.host, StepID: "gpu", Env: env, Window: vocab.Window{Start: now.Add(-10 * time.Minute), End: now}}
			res, err := gpuStepFor(t, c.host).Run(context.Background(), in)
			if err != nil {
				t.Fatal(err)
			}
			if n := ct.n.Load(); n != 4 || res.Findings["queries"] != 4 {
				t.Errorf("%d requests to Prometheus (%v queries) for %d GPUs, want 4 whatever the count", n, res.Findings["queries"], c.gpus)
			}
			v := res.Findings[views.FindingGPU].(*views.GPUView)
			if v.Selector != c.selector || v.Measured != c.measured || len(v.GPUs) != c.gpus || len(v.Failed) > 0 {
				t.Fatalf("view %+v", v)
			}
			for _, g := range v.GPUs {
				if g.Hostname != c.hostname || g.SMClockMaxMHz == nil || *g.SMClockMaxMHz != 1980 || (g.ECCUncorrectable != nil) != c.ecc || g.Util == nil {
					t.Errorf("GPU %+v: another host's, or not normalised, or a sentinel taken for a value", g)
				}
			}
			if !strings.HasPrefix(res.Summary, c.summaryOf) {
				t.Errorf("summary %q, want it to start %q", res.Summary, c.summaryOf)
			}
			tri, _ := triage.New(triage.Config{})
			out, err := tri.Run(context.Background(), &vocab.Input{Env: &vocab.Env{}, Prior: map[string]*vocab.Result{
				"snapshot": {Signals: slow, Findings: map[string]any{"source": vocab.SourcePromQL}}, "gpu": res}})
			if err != nil {
				t.Fatal(err)
			}
			all := strings.Join(out.Verdict.Evidence, "\n")
			t.Logf("%s: %s\n%s", res.Summary, out.Verdict.ID, all)
			if out.Verdict.ID != c.verdict || !strings.Contains(all, c.evidence) {
				t.Fatalf("verdict %s, want %s with %q\n%s", out.Verdict.ID, c.verdict, c.evidence, all)
			}
			for _, group := range c.together {
				if !slices.ContainsFunc(out.Verdict.Evidence, func(l string) bool {
					return !slices.ContainsFunc(group, func(want string) bool { return !strings.Contains(l, want) })
				}) {
					t.Errorf("no evidence line has all of %q:\n%s", group, all)
				}
			}
			for _, other := range c.absent {
				if strings.Contains(all, other) {
					t.Errorf("evidence names another host's GPU (%s):\n%s", other, all)
				}
			}
		})
	}
}

// BenchmarkGPU is the gpu step's wall time on a real Prometheus holding two
// hosts' DCGM series (2 and 4 GPUs), with the shipped mapping: 4 queries in
// parallel, so the step should cost about its slowest query.
//
//	go test -bench GPU -run '^$' ./capture
func BenchmarkGPU(b *testing.B) {
	prom, _ := gpuFleet(b)
	step := gpuStepFor(b, "127.0.0.2")
	env, ct := gpuEnv(b, prom.URL)
	var wall time.Duration
	n := 0
	for b.Loop() {
		now := time.Now()
		in := &vocab.Input{RunID: fmt.Sprintf("bench-%d", n), StepID: "gpu", Env: env, Window: vocab.Window{Start: now.Add(-10 * time.Minute), End: now}}
		t0 := time.Now()
		res, err := step.Run(context.Background(), in)
		wall += time.Since(t0)
		if err != nil || !res.Findings[views.FindingGPU].(*views.GPUView).Measured {
			b.Fatalf("err %v, %v", err, res.Summary)
		}
		n++
	}
	b.ReportMetric(float64(wall.Milliseconds())/float64(n), "wall-ms/op")
	b.ReportMetric(float64(ct.n.Load())/float64(n), "queries/op")
}
