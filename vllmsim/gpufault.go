package vllmsim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The GPU faults a test or an operator injects (Options.GPUFaults,
// Sim.SetGPUFaults, POST /admin/gpu/faults, --instance-gpu): their kinds,
// CLI text and wire form. What each does to the GPU and the engine is in
// gpu.go (gpuConditionAt), what DCGM shows of it in dcgm.go.

// Kinds of GPU fault.
const (
	GPUFaultThrottle = "throttle"
	GPUFaultXID      = "xid"
	// GPUFaultRowRemap is a memory row-remap event: Rows rows remapped for
	// uncorrectable errors (DCGM field 393 rises by Rows) and, with Failed,
	// a remapping that failed (field 395 reads 1). It does not slow the
	// engine: the harm is the next uncorrectable error's, and the GPU is an
	// RMA candidate. A real GPU also logs XID 63 (remap recorded) or 64
	// (failed); inject those with an xid fault when a test wants them.
	GPUFaultRowRemap = "row_remap"
)

// GPUFault is a fault injected into one GPU of the instance: a throttle for
// Reason, an XID error with code XID, or a row-remap event (Rows, Failed),
// starting After the moment it is set (0: now) on the sim's clock.
type GPUFault struct {
	Kind   string
	Reason string // throttle: one of ThrottleReasons
	XID    int    // xid: the XID code (e.g. 79, "GPU has fallen off the bus")
	GPU    int    // which GPU (tensor-parallel rank); default 0
	After  time.Duration
	// Clock, for a throttle, overrides the SM clock's share of max the
	// reason implies (0: the reason's, throttleSpecs): a power brake or HW
	// slowdown can pull clocks far lower than the typical share.
	Clock float64
	// Rows, for a row remap, is how many rows were remapped for
	// uncorrectable errors; Failed says a remapping failed.
	Rows   int
	Failed bool
}

// ParseGPUFault reads the CLI form: "throttle:<reason>[:<clock share>]",
// "xid:<code>" or "row_remap:<rows>|failed", optionally followed by
// "@<delay>" (Go duration text) for an onset: "throttle:sw_thermal@30s",
// "throttle:hw_power_brake:0.25", "xid:79@10s", "row_remap:failed@5s".
func ParseGPUFault(spec string) (GPUFault, error) {
	var f GPUFault
	body, delay, hasDelay := strings.Cut(strings.TrimSpace(spec), "@")
	if hasDelay {
		d, err := time.ParseDuration(delay)
		if err != nil {
			return f, fmt.Errorf("gpu fault %q: delay: %w", spec, err)
		}
		f.After = d
	}
	kind, arg, _ := strings.Cut(body, ":")
	f.Kind = kind
	switch kind {
	case GPUFaultThrottle:
		reason, clock, hasClock := strings.Cut(arg, ":")
		f.Reason = reason
		if hasClock {
			c, err := strconv.ParseFloat(clock, 64)
			if err != nil || c <= 0 {
				return f, fmt.Errorf("gpu fault %q: clock share: want a number in (0, 1]", spec)
			}
			f.Clock = c
		}
	case GPUFaultXID:
		n, err := strconv.Atoi(arg)
		if err != nil {
			return f, fmt.Errorf("gpu fault %q: xid code: want a number", spec)
		}
		f.XID = n
	case GPUFaultRowRemap:
		if arg == "failed" {
			f.Failed = true
			break
		}
		n, err := strconv.Atoi(arg)
		if err != nil {
			return f, fmt.Errorf("gpu fault %q: row remap: want a row count or \"failed\"", spec)
		}
		f.Rows = n
	}
	if err := f.validate(); err != nil {
		return f, fmt.Errorf("gpu fault %q: %w", spec, err)
	}
	return f, nil
}

func (f GPUFault) validate() error {
	switch f.Kind {
	case GPUFaultThrottle:
		if _, ok := throttleSpecs[f.Reason]; !ok {
			return fmt.Errorf("throttle reason %q: want one of %s", f.Reason, strings.Join(ThrottleReasons(), ", "))
		}
		if f.XID != 0 {
			return errors.New("a throttle has no xid code")
		}
		if f.Clock < 0 || f.Clock > 1 {
			return fmt.Errorf("clock share %v: want (0, 1]", f.Clock)
		}
	case GPUFaultXID:
		if f.XID < 1 || f.XID > 999 {
			return fmt.Errorf("xid code %d: want 1..999", f.XID)
		}
		if f.Reason != "" || f.Clock != 0 {
			return errors.New("an xid fault has no throttle reason or clock")
		}
	case GPUFaultRowRemap:
		if f.Rows < 0 || f.Rows > 1<<16 || (f.Rows == 0 && !f.Failed) {
			return fmt.Errorf("row remap of %d rows: want 1..65536 rows, or failed", f.Rows)
		}
		if f.Reason != "" || f.Clock != 0 || f.XID != 0 {
			return errors.New("a row remap has no throttle reason, clock or xid code")
		}
	default:
		return fmt.Errorf("kind %q: want %s, %s or %s", f.Kind, GPUFaultThrottle, GPUFaultXID, GPUFaultRowRemap)
	}
	if f.Kind != GPUFaultRowRemap && (f.Rows != 0 || f.Failed) {
		return fmt.Errorf("a %s fault has no rows or failed", f.Kind)
	}
	if f.After < 0 {
		return fmt.Errorf("after %v: want >= 0", f.After)
	}
	if f.GPU < 0 || f.GPU > 7 {
		return fmt.Errorf("gpu %d: want 0..7", f.GPU)
	}
	return nil
}

// gpuFaultJSON is the wire form: after as Go duration text.
type gpuFaultJSON struct {
	Kind   string  `json:"kind"`
	Reason string  `json:"reason,omitempty"`
	XID    int     `json:"xid,omitempty"`
	GPU    int     `json:"gpu"`
	After  string  `json:"after,omitempty"`
	Clock  float64 `json:"clock,omitempty"`
	Rows   int     `json:"rows,omitempty"`
	Failed bool    `json:"failed,omitempty"`
}

// MarshalJSON writes After as text ("30s").
func (f GPUFault) MarshalJSON() ([]byte, error) {
	w := gpuFaultJSON{Kind: f.Kind, Reason: f.Reason, XID: f.XID, GPU: f.GPU, Clock: f.Clock, Rows: f.Rows, Failed: f.Failed}
	if f.After > 0 {
		w.After = f.After.String()
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads the object form strictly, or a string in the CLI form
// ("xid:79@10s").
func (f *GPUFault) UnmarshalJSON(b []byte) error {
	if t := bytes.TrimSpace(b); len(t) > 0 && t[0] == '"' {
		var spec string
		if err := json.Unmarshal(t, &spec); err != nil {
			return err
		}
		g, err := ParseGPUFault(spec)
		if err != nil {
			return err
		}
		*f = g
		return nil
	}
	var w gpuFaultJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return fmt.Errorf("gpu fault: %w", err)
	}
	g := GPUFault{Kind: w.Kind, Reason: w.Reason, XID: w.XID, GPU: w.GPU, Clock: w.Clock, Rows: w.Rows, Failed: w.Failed}
	if w.After != "" {
		d, err := time.ParseDuration(w.After)
		if err != nil {
			return fmt.Errorf("gpu fault: after: %w", err)
		}
		g.After = d
	}
	if err := g.validate(); err != nil {
		return fmt.Errorf("gpu fault: %w", err)
	}
	*f = g
	return nil
}
