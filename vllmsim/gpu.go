package vllmsim

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"time"
)

// The GPUs under the engine: their clocks, the faults injected into them and
// how those slow the engine. A throttled GPU runs its SM clock below max, so
// every GPU kernel of a step takes max/actual times as long (the slowest rank
// sets the pace under tensor parallelism); an XID fault degrades the engine
// (XIDSlowdown) from the moment it fires. The DCGM surface (dcgm.go) shows
// the same state.

// Clock event (throttle) reasons a fault can inject, as DCGM's
// DCGM_EXP_CLOCK_EVENTS_COUNT names them.
const (
	ThrottlePowerCap     = "power_cap"
	ThrottleHWSlowdown   = "hw_slowdown"
	ThrottleSWThermal    = "sw_thermal"
	ThrottleHWThermal    = "hw_thermal"
	ThrottleHWPowerBrake = "hw_power_brake"
)

// XIDSlowdown is how much slower every GPU kernel runs once an XID fault
// has fired: the GPU is degraded (retries, a lost engine) but still serves.
const XIDSlowdown = 3.0

// H100 SXM clocks, the GPU the DCGM surface reports.
const (
	smClockMaxMHz  = 1980
	memClockMHz    = 2619
	gpuIdleWatts   = 70
	gpuMaxWatts    = 700
	powerCapWatts  = 490 // a 70% power cap
	gpuAmbientC    = 30
	gpuCPerWatt    = 0.065 // °C above ambient per W drawn
	busyWindowSize = 5 * time.Second
)

// throttleSpec is what a reason does to a GPU: the clock bit DCGM reports,
// the SM clock as a share of max, and the temperature it implies (0: the
// one power gives).
type throttleSpec struct {
	bit   uint64
	clock float64
	tempC float64
}

var throttleSpecs = map[string]throttleSpec{
	ThrottlePowerCap:     {bit: 0x4, clock: 0.70},
	ThrottleHWSlowdown:   {bit: 0x8, clock: 0.50, tempC: 90},
	ThrottleSWThermal:    {bit: 0x20, clock: 0.55, tempC: 87},
	ThrottleHWThermal:    {bit: 0x40, clock: 0.45, tempC: 93},
	ThrottleHWPowerBrake: {bit: 0x80, clock: 0.40},
}

// ThrottleReasons returns the reasons a throttle fault may name, sorted.
func ThrottleReasons() []string { return slices.Sorted(maps.Keys(throttleSpecs)) }

// armedFault is a fault with its onset on the engine clock.
type armedFault struct {
	GPUFault
	at time.Duration
}

// GPUFaultState is a fault as GET /admin/gpu reports it.
type GPUFaultState struct {
	Fault  GPUFault  `json:"fault"`
	At     time.Time `json:"at"`     // onset, on the sim's clock
	Active bool      `json:"active"` // the onset has passed
}

// SetGPUFaults replaces the injected GPU faults (none: clear them all); each
// starts its After from now. A GPU whose XID fault is cleared reports XID 0
// again.
func (s *Sim) SetGPUFaults(faults []GPUFault) error {
	for _, f := range faults {
		if err := f.validate(); err != nil {
			return fmt.Errorf("vllmsim: gpu fault: %w", err)
		}
		if f.GPU >= s.opts.TensorParallel {
			return fmt.Errorf("vllmsim: gpu fault on gpu %d: the instance has %d", f.GPU, s.opts.TensorParallel)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gpuFaults = s.gpuFaults[:0]
	for _, f := range faults {
		s.gpuFaults = append(s.gpuFaults, armedFault{GPUFault: f, at: s.eng.now + f.After})
	}
	return nil
}

// GPUFaults reports the injected GPU faults.
func (s *Sim) GPUFaults() []GPUFaultState {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]GPUFaultState, 0, len(s.gpuFaults))
	for _, f := range s.gpuFaults {
		out = append(out, GPUFaultState{Fault: f.GPUFault, At: s.wall(f.at), Active: f.at <= s.eng.now})
	}
	return out
}

// gpuCondition is one GPU's state at an instant.
type gpuCondition struct {
	reasons   uint64  // clock event reason bits
	clock     float64 // SM clock as a share of max
	tempFloor float64 // the temperature a thermal reason implies, °C (0: none)
	powerCap  bool
	xid       int  // the last XID fired (0: none)
	remapRows int  // rows remapped for uncorrectable errors
	remapFail bool // a row remapping failed
}

// slowdown is how much longer than nominal the GPU's kernels take.
func (c gpuCondition) slowdown() float64 {
	d := 1 / c.clock
	if c.xid != 0 {
		d *= XIDSlowdown
	}
	return d
}

// gpuConditionAt is GPU gpu's state at t: the scenario's throttle (GPU 0)
// and the faults whose onset has passed. Callers hold mu.
func (s *Sim) gpuConditionAt(gpu int, t time.Duration) gpuCondition {
	c := gpuCondition{clock: 1}
	throttle := func(reason string, clock float64) {
		sp := throttleSpecs[reason]
		if clock == 0 {
			clock = sp.clock
		}
		c.reasons |= sp.bit
		c.clock = min(c.clock, clock)
		c.tempFloor = max(c.tempFloor, sp.tempC)
		c.powerCap = c.powerCap || reason == ThrottlePowerCap
	}
	if gpu == 0 && s.scenario.Throttle != "" {
		throttle(s.scenario.Throttle, 0)
	}
	for _, f := range s.gpuFaults {
		if f.GPU != gpu || f.at > t {
			continue
		}
		switch f.Kind {
		case GPUFaultThrottle:
			throttle(f.Reason, f.Clock)
		case GPUFaultXID:
			c.xid = f.XID
		case GPUFaultRowRemap:
			c.remapRows += f.Rows
			c.remapFail = c.remapFail || f.Failed
		}
	}
	return c
}

// gpuSlowdownAt is the engine's hook: the slowest GPU sets the pace of a
// step starting at t. Callers hold mu.
func (s *Sim) gpuSlowdownAt(t time.Duration) float64 {
	d := 1.0
	for g := range s.opts.TensorParallel {
		d = max(d, s.gpuConditionAt(g, t).slowdown())
	}
	return d
}

// busyLog keeps the engine's recent steps to give what DCGM reports of the
// last busyWindowSize: the share of time a GPU kernel ran (GPU_UTIL), and
// how hard the steps worked the GPU (tokens per step: a wide prefill chunk
// draws more power than a narrow decode batch).
type busyLog struct {
	spans []busySpan
}

type busySpan struct {
	start, end time.Duration
	gpu        float64 // share of the step a GPU kernel ran (the rest is host-side scheduling)
	intensity  float64 // 0..1: tokens in the step over 512
}

func spanOf(start, end time.Duration, w stepWork, c stepCost) busySpan {
	sp := busySpan{start: start, end: end, intensity: min(1, float64(w.prefillTokens+w.decodeSeqs)/512)}
	if c.total > 0 {
		var cpu time.Duration
		for _, k := range c.kernels {
			if k.cpu {
				cpu += k.dur
			}
		}
		sp.gpu = float64(c.total-cpu) / float64(c.total)
	}
	return sp
}

func (b *busyLog) add(sp busySpan) {
	b.spans = append(b.spans, sp)
	cut := 0
	for cut < len(b.spans) && b.spans[cut].end < sp.end-busyWindowSize {
		cut++
	}
	b.spans = b.spans[cut:]
}

// share is the GPU busy share of [now-window, now] and the mean intensity
// of that busy time, counting inflight (a step still running) too.
func (b *busyLog) share(now time.Duration, inflight *busySpan) (util, intensity float64) {
	from := max(0, now-busyWindowSize)
	if now <= from {
		return 0, 0
	}
	var busy, work float64
	add := func(sp busySpan) {
		s, e := max(sp.start, from), min(sp.end, now)
		if e <= s {
			return
		}
		d := float64(e-s) * sp.gpu
		busy += d
		work += d * sp.intensity
	}
	for _, sp := range b.spans {
		add(sp)
	}
	if inflight != nil {
		add(*inflight)
	}
	if busy == 0 {
		return 0, 0
	}
	return min(1, busy/float64(now-from)), work / busy
}

// gpuFaultsRequest is POST /admin/gpu/faults's body.
type gpuFaultsRequest struct {
	Faults []GPUFault `json:"faults"`
}

// handleGPUFaults is POST /admin/gpu/faults: {"faults":[...]} replaces the
// GPU faults (an empty list clears them); each is an object
// {"kind","reason","xid","gpu","after"} or the CLI text ("xid:79@10s").
func (s *Sim) handleGPUFaults(w http.ResponseWriter, r *http.Request) {
	var req gpuFaultsRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "body: " + err.Error()})
		return
	}
	if req.Faults == nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": `body: want {"faults":[...]} ([] clears them)`})
		return
	}
	if err := s.SetGPUFaults(req.Faults); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, s.GPUFaults())
}
