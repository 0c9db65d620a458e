package vllmsim

import (
	"math"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestThrottleSlowsEveryKernel: a throttle stretches every GPU kernel of a
// step by max/actual clock alike (not one family, as unexplained's GEMM
// regression does) and leaves the host-side scheduling as it was.
func TestThrottleSlowsEveryKernel(t *testing.T) {
	w := stepWork{prefillTokens: 300, prefillPairs: 300 * 200, decodeSeqs: 20, decodeCtx: 20 * 400, sampled: 22}
	base := costOf(w, 1, 1)
	slow := 1 / throttleSpecs[ThrottleSWThermal].clock
	got := costOf(w, 1, slow)
	if len(got.kernels) != 5 {
		t.Fatalf("kernels %+v", got.kernels)
	}
	for i, k := range got.kernels {
		want := base.kernels[i].dur
		if !k.cpu {
			want = time.Duration(float64(want) * slow)
		}
		if k.dur != want {
			t.Errorf("%s: %v, want %v (nominal %v)", k.name, k.dur, want, base.kernels[i].dur)
		}
	}
	if got.total <= base.total {
		t.Errorf("throttled step %v, nominal %v", got.total, base.total)
	}
}

// TestThrottledInstanceIsSlower runs a healthy instance and one whose GPU 0
// throttles (sw_thermal) under the same traffic and seed: the throttled one's
// steps are longer, and its /metrics latencies rise across the board, while
// its DCGM surface shows the clock, the reason bit and the heat.
func TestThrottledInstanceIsSlower(t *testing.T) {
	run := func(faults []GPUFault) (signals, map[string]*dcgmFamily) {
		s := newDCGMSim(t, Options{Seed: 7, Load: 2.0, GPUFaults: faults})
		s.Advance(20 * time.Second)
		sig := measure(t, s, 90*time.Second)
		return sig, scrapeDCGM(t, s.DCGMHandler())
	}
	healthy, hd := run(nil)
	throttled, td := run([]GPUFault{{Kind: GPUFaultThrottle, Reason: ThrottleSWThermal}})
	t.Logf("healthy   %s", healthy)
	t.Logf("throttled %s", throttled)
	for _, c := range []struct {
		name   string
		h, thr float64
	}{
		{"TTFT p50", healthy.TTFTp50, throttled.TTFTp50},
		{"ITL p50", healthy.ITLp50, throttled.ITLp50},
		{"ITL p99", healthy.ITLp99, throttled.ITLp99},
		{"decode p50", healthy.DecodeP50, throttled.DecodeP50},
	} {
		if !(c.thr > 1.5*c.h) {
			t.Errorf("%s: throttled %.3f, healthy %.3f: want > 1.5x", c.name, c.thr, c.h)
		}
	}
	if math.Abs(throttled.PromptMean-healthy.PromptMean) > 0.1*healthy.PromptMean {
		t.Errorf("prompts differ: %.0f vs %.0f (same traffic)", throttled.PromptMean, healthy.PromptMean)
	}
	val := func(d map[string]*dcgmFamily, name string) float64 {
		v, err := strconv.ParseFloat(d[name].samples[0].value, 64)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return v
	}
	if v := val(hd, "DCGM_FI_DEV_SM_CLOCK"); v != 1980 {
		t.Errorf("healthy SM clock %v", v)
	}
	if v := val(td, "DCGM_FI_DEV_SM_CLOCK"); v != 1089 {
		t.Errorf("throttled SM clock %v, want 55%% of 1980", v)
	}
	if h, th := val(hd, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"), val(td, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"); h != 0 || th != 0x20 {
		t.Errorf("clock event reasons healthy %v throttled %v, want 0 and 0x20 (sw_thermal)", h, th)
	}
	if h, th := val(hd, "DCGM_FI_DEV_GPU_TEMP"), val(td, "DCGM_FI_DEV_GPU_TEMP"); h > 70 || th < 87 {
		t.Errorf("temperature healthy %v throttled %v: want a thermal throttle hot (>= 87)", h, th)
	}
	if u := val(hd, "DCGM_FI_DEV_GPU_UTIL"); u < 50 || u > 100 {
		t.Errorf("healthy GPU util %v%% under traffic", u)
	}
	if p := val(hd, "DCGM_FI_DEV_POWER_USAGE"); p < 300 || p > 700 {
		t.Errorf("healthy power %v W under traffic", p)
	}
}

// TestIdleGPUIsIdle: with no traffic the GPU reads idle: no utilisation,
// idle power, a cool die, no clock event.
func TestIdleGPUIsIdle(t *testing.T) {
	s := newDCGMSim(t, Options{Load: NoLoad})
	s.Advance(10 * time.Second)
	d := scrapeDCGM(t, s.DCGMHandler())
	for name, want := range map[string]string{"DCGM_FI_DEV_GPU_UTIL": "0", "DCGM_FI_DEV_POWER_USAGE": "70.000000",
		"DCGM_FI_DEV_GPU_TEMP": "35", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": "0", "DCGM_FI_DEV_SM_CLOCK": "1980"} {
		if got := d[name].samples[0].value; got != want {
			t.Errorf("%s = %s, want %s", name, got, want)
		}
	}
}

// TestXIDFaultFiresAfterItsDelay: an XID fault set with a delay shows on DCGM
// from its onset (the last XID's value, with the exporter's err_code and
// err_msg), degrades the engine from then on, and clears with the fault.
func TestXIDFaultFiresAfterItsDelay(t *testing.T) {
	f, err := ParseGPUFault("xid:79@10s")
	if err != nil {
		t.Fatal(err)
	}
	s := newDCGMSim(t, Options{Seed: 3, Load: 1.0, GPUFaults: []GPUFault{f}})
	xid := func() dcgmSample { return scrapeDCGM(t, s.DCGMHandler())["DCGM_FI_DEV_XID_ERRORS"].samples[0] }
	s.Advance(9 * time.Second)
	if x := xid(); x.value != "0" || x.values["err_code"] != "0" || x.values["err_msg"] != "No Error" {
		t.Fatalf("before the onset: %+v", x)
	}
	slowdown := func() float64 {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.gpuSlowdownAt(s.eng.now)
	}
	before := slowdown()
	s.Advance(2 * time.Second)
	if x := xid(); x.value != "79" || x.values["err_code"] != "79" || x.values["err_msg"] != "GPU has fallen off the bus" {
		t.Fatalf("after the onset: %+v", x)
	}
	after := slowdown()
	if before != 1 || after != XIDSlowdown {
		t.Errorf("engine slowdown %v before, %v after, want 1 and %v", before, after, XIDSlowdown)
	}
	st := s.GPUFaults()
	if len(st) != 1 || !st[0].Active || !st[0].At.Equal(s.opts.Start.Add(10*time.Second)) {
		t.Errorf("fault state %+v", st)
	}
	if err := s.SetGPUFaults(nil); err != nil {
		t.Fatal(err)
	}
	if x := xid(); x.value != "0" {
		t.Errorf("after clearing: %+v", x)
	}
}

// TestDCGMNames49 reads the same GPU state in both generations: the 4.9
// names carry DCGM 4.7's units (Hz, J, ratios, bytes) and label names.
func TestDCGMNames49(t *testing.T) {
	scrape := func(names string) map[string]*dcgmFamily {
		s := newDCGMSim(t, Options{Seed: 5, DCGM: DCGMOptions{Names: names},
			GPUFaults: []GPUFault{{Kind: GPUFaultThrottle, Reason: ThrottlePowerCap}}})
		s.Advance(30 * time.Second)
		return scrapeDCGM(t, s.DCGMHandler())
	}
	old, cur := scrape(""), scrape(DCGMNames49)
	num := func(d map[string]*dcgmFamily, name string) float64 {
		f := d[name]
		if f == nil {
			t.Fatalf("%s missing", name)
		}
		v, err := strconv.ParseFloat(f.samples[0].value, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, c := range []struct {
		classic, current string
		scale            float64
		tol              float64
	}{
		{"DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_SM_CLOCK_HERTZ", 1e6, 0},
		{"DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ", 1e6, 0},
		{"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL", 1e-3, 1},
		{"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL_RATIO", 1e-2, 1e-6},
		{"DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_USED_BYTES", 1 << 20, 0},
		{"DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_FREE_BYTES", 1 << 20, 0},
		{"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_TEMP_CELSIUS", 1, 0},
		{"DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_BOARD_POWER_WATTS", 1, 1e-6},
		{"DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_XID_ERROR", 1, 0},
		{"DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", 1, 0},
	} {
		if got, want := num(cur, c.current), num(old, c.classic)*c.scale; math.Abs(got-want) > c.tol {
			t.Errorf("%s = %v, want %s × %v = %v", c.current, got, c.classic, c.scale, want)
		}
		if c.classic != c.current && cur[c.classic] != nil {
			t.Errorf("%s: a classic name in the 4.9 generation", c.classic)
		}
	}
	if r := num(cur, "DCGM_FI_DEV_GPU_UTIL_RATIO"); r <= 0 || r > 1 {
		t.Errorf("util ratio %v", r)
	}
	if hz := num(cur, "DCGM_FI_DEV_SM_CLOCK_HERTZ"); hz != 1386e6 {
		t.Errorf("power-capped SM clock %v Hz, want 70%% of 1980 MHz", hz)
	}
	labels := strings.Join(cur["DCGM_FI_DEV_SM_CLOCK_HERTZ"].samples[0].labels, ",")
	if labels != "gpu,UUID,pci_bus_id,device,modelName,hostname,DCGM_FI_SYSTEM_DRIVER_VERSION" {
		t.Errorf("4.9 labels %s", labels)
	}
}

// TestDCGMSentinel: a field asked for as a sentinel reads DCGM's
// not-supported value; nothing else does, and without the option nothing
// is a sentinel.
func TestDCGMSentinel(t *testing.T) {
	for _, sentinels := range [][]string{nil, {"DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"}} {
		s := newDCGMSim(t, Options{DCGM: DCGMOptions{Sentinels: sentinels}})
		s.Advance(time.Second)
		for name, f := range scrapeDCGM(t, s.DCGMHandler()) {
			isSentinel := f.samples[0].value == DCGMSentinel
			want := name == "DCGM_FI_DEV_MEMORY_TEMP" || name == "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
			if isSentinel != (want && sentinels != nil) {
				t.Errorf("sentinels %v: %s = %s", sentinels, name, f.samples[0].value)
			}
		}
	}
	if _, err := New(Options{DCGM: DCGMOptions{Sentinels: []string{"DCGM_FI_DEV_NOPE"}}}); err == nil {
		t.Error("an unknown sentinel field accepted")
	}
}

// TestGPUFaultsAdminRoute sets, reads and clears faults over HTTP and
// refuses malformed bodies without changing anything.
func TestGPUFaultsAdminRoute(t *testing.T) {
	s := newDCGMSim(t, Options{Load: NoLoad, TensorParallel: 2})
	h := s.Handler()
	post := func(body string) int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", "/admin/gpu/faults", strings.NewReader(body)))
		return rec.Code
	}
	clock := func(gpu int) string {
		return scrapeDCGM(t, s.DCGMHandler())["DCGM_FI_DEV_SM_CLOCK"].samples[gpu].value
	}
	if c := post(`{"faults":[{"kind":"throttle","reason":"hw_thermal","gpu":1},"xid:48@1m"]}`); c != 200 {
		t.Fatalf("set: %d", c)
	}
	if clock(0) != "1980" || clock(1) != "891" {
		t.Errorf("clocks %s %s, want gpu 1 at 45%%", clock(0), clock(1))
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/admin/gpu", nil))
	if !strings.Contains(rec.Body.String(), `"reason":"hw_thermal","gpu":1`) || !strings.Contains(rec.Body.String(), `"after":"1m0s"`) {
		t.Errorf("GET /admin/gpu: %s", rec.Body.String())
	}
	for _, bad := range []string{``, `{}`, `{"faults":[{"kind":"melt"}]}`, `{"faults":[{"kind":"throttle","reason":"sw_thermal","gpu":2}]}`,
		`{"faults":["xid:0"]}`, `{"faults":[],"x":1}`} {
		if c := post(bad); c != 400 {
			t.Errorf("%q: %d", bad, c)
		}
	}
	if clock(1) != "891" {
		t.Error("a refused body changed the faults")
	}
	if c := post(`{"faults":[]}`); c != 200 || clock(1) != "1980" {
		t.Errorf("clear: %d, clock %s", c, clock(1))
	}
}

func TestParseGPUFault(t *testing.T) {
	for spec, want := range map[string]GPUFault{
		"throttle:sw_thermal":             {Kind: GPUFaultThrottle, Reason: ThrottleSWThermal},
		"throttle:power_cap@30s":          {Kind: GPUFaultThrottle, Reason: ThrottlePowerCap, After: 30 * time.Second},
		"xid:79":                          {Kind: GPUFaultXID, XID: 79},
		"xid:48@1m30s":                    {Kind: GPUFaultXID, XID: 48, After: 90 * time.Second},
		"throttle:hw_power_brake":         {Kind: GPUFaultThrottle, Reason: ThrottleHWPowerBrake},
		"throttle:hw_power_brake:0.25@5s": {Kind: GPUFaultThrottle, Reason: ThrottleHWPowerBrake, Clock: 0.25, After: 5 * time.Second},
	} {
		got, err := ParseGPUFault(spec)
		if err != nil || got != want {
			t.Errorf("%s: %+v %v", spec, got, err)
		}
	}
	for _, bad := range []string{"", "throttle", "throttle:hot", "xid", "xid:abc", "xid:0", "xid:79@-1s", "xid:79@1", "melt:1",
		"throttle:sw_thermal:0", "throttle:sw_thermal:1.5", "throttle:sw_thermal:fast"} {
		if _, err := ParseGPUFault(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestThrottledTraceShowsEverythingSlower: the kernels a profile shows for a
// throttled step are each ~max/actual clock longer than the nominal step's,
// GEMMs, attention, norms and sampling alike (with unexplained's GEMM
// regression only the GEMMs grow).
func TestThrottledTraceShowsEverythingSlower(t *testing.T) {
	w := stepWork{prefillTokens: 200, prefillPairs: 200 * 300, decodeSeqs: 24, decodeCtx: 24 * 500, sampled: 25}
	slow := 1 / throttleSpecs[ThrottleSWThermal].clock
	byName := func(c stepCost) map[string]float64 {
		_, ks := stepKernels(c, w, 4, 1, ampereKernels)
		out := map[string]float64{}
		for _, k := range ks {
			out[k.k.name] += k.us
		}
		return out
	}
	nominal, throttled, gemm := byName(costOf(w, 1, 1)), byName(costOf(w, 1, slow)), byName(costOf(w, 8, 1))
	grewGEMM := 0
	for name, us := range nominal {
		if r := throttled[name] / us; math.Abs(r-slow) > 0.02*slow {
			t.Errorf("%s: throttled %.0f µs vs %.0f nominal: x%.2f, want x%.2f", name, throttled[name], us, r, slow)
		}
		if gemm[name]/us > 1.5 {
			grewGEMM++
		}
	}
	if grewGEMM == 0 || grewGEMM == len(nominal) {
		t.Errorf("a GEMM regression grew %d of %d kernel families; want some, not all", grewGEMM, len(nominal))
	}
}

// TestThrottleClockOverride: a throttle's clock share overrides its
// reason's, on DCGM and in the engine's slowdown.
func TestThrottleClockOverride(t *testing.T) {
	s := newDCGMSim(t, Options{Seed: 7, Load: NoLoad, GPUFaults: []GPUFault{
		{Kind: GPUFaultThrottle, Reason: ThrottleHWPowerBrake, Clock: 0.25}}})
	s.Advance(time.Second)
	fam := scrapeDCGM(t, s.DCGMHandler())["DCGM_FI_DEV_SM_CLOCK"]
	if fam == nil || fam.samples[0].value != "495" {
		t.Fatalf("SM clock %+v, want 25%% of 1980 = 495", fam)
	}
	s.mu.Lock()
	d := s.gpuSlowdownAt(time.Duration(s.clock.Load()))
	s.mu.Unlock()
	if d != 4 {
		t.Errorf("slowdown %v, want 4 (max/actual clock)", d)
	}
}
