package vllmsim

import (
	"encoding/json"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/autocapture/autocapture/capture/gpu"
)

// The simulator's DCGM names against the gpu step's table (gpu.DCGMFields,
// which cites DCGM's headers and the exporter's CSV): where both know a
// field, they must agree on both generations' names, the type and the unit
// change, or the gpu step would read our own closed loop and miss a real
// exporter (or the reverse).

// simFieldsInCaptureTable are the DCGM field ids of capture's table the
// surface emits (the exporter's default CSV rows plus the clock event
// reasons): the join below must find each.
var simFieldsInCaptureTable = []int{100, 112, 150, 155, 203, 230, 393, 395, 1001}

func TestDCGMSurfaceAgreesWithCaptureTable(t *testing.T) {
	found := map[int]bool{}
	for _, cf := range gpu.DCGMFields() {
		for i := range dcgmFields {
			sf := &dcgmFields[i]
			if !slices.Contains(cf.Names(), sf.classic) && sf.current != cf.Current {
				continue
			}
			found[cf.ID] = true
			t.Run(cf.Classic, func(t *testing.T) {
				if (sf.classic != cf.Classic && !slices.Contains(cf.Aliases, sf.classic)) || sf.current != cf.Current {
					t.Errorf("sim %s → %s, capture's table (field %d) %s → %s", sf.classic, sf.current, cf.ID, cf.Classic, cf.Current)
				}
				if sf.typ != cf.Type {
					t.Errorf("sim TYPE %s, capture's table %s", sf.typ, cf.Type)
				}
				to := sf.toCurrent
				if to == 0 {
					to = 1
				}
				if cf.CurrentUnit.Scale == 0 {
					// Percent or ratio, decided per series: the sim's current
					// values must be one of the two.
					if to != 1 && to != 1e-2 {
						t.Errorf("sim scales %s by %v to %s: neither the percent nor the ratio capture reads", sf.classic, to, sf.current)
					}
					return
				}
				if want := cf.ClassicUnit.Scale / cf.CurrentUnit.Scale; math.Abs(to-want) > 1e-12*want {
					t.Errorf("sim: %s = %s × %v; capture's table: %s is %s, %s is %s (× %v)", sf.current, sf.classic, to,
						cf.Classic, cf.ClassicUnit.Name, cf.Current, cf.CurrentUnit.Name, want)
				}
			})
		}
	}
	for _, id := range simFieldsInCaptureTable {
		if !found[id] {
			t.Errorf("field %d: in capture's table, not emitted by the sim", id)
		}
	}
}

// TestRowRemapFaultOnDCGM: a row-remap fault shows, from its onset, as the
// uncorrectable remapped-rows counter rising by its rows and the failure
// flag, under both generations' names (DCGM fields 393 and 395).
func TestRowRemapFaultOnDCGM(t *testing.T) {
	for _, c := range []struct {
		names, rows, failed string
	}{
		{DCGMNamesClassic, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_FAILURE"},
		{DCGMNames49, "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL", "DCGM_FI_DEV_ROW_REMAP_FAILED"},
	} {
		t.Run(c.names, func(t *testing.T) {
			s := newDCGMSim(t, Options{Load: NoLoad, TensorParallel: 2, DCGM: DCGMOptions{Names: c.names}, GPUFaults: []GPUFault{
				{Kind: GPUFaultRowRemap, Rows: 2, GPU: 1, After: 10 * time.Second},
				{Kind: GPUFaultRowRemap, Failed: true, GPU: 1, After: 20 * time.Second}}})
			read := func() (rows, failed []string) {
				d := scrapeDCGM(t, s.DCGMHandler())
				for _, sm := range d[c.rows].samples {
					rows = append(rows, sm.value)
				}
				for _, sm := range d[c.failed].samples {
					failed = append(failed, sm.value)
				}
				return rows, failed
			}
			for _, step := range []struct {
				at           time.Duration
				rows, failed []string
			}{
				{5 * time.Second, []string{"0", "0"}, []string{"0", "0"}},
				{15 * time.Second, []string{"0", "2"}, []string{"0", "0"}},
				{25 * time.Second, []string{"0", "2"}, []string{"0", "1"}},
			} {
				s.Advance(step.at - time.Duration(s.clock.Load()))
				if rows, failed := read(); !slices.Equal(rows, step.rows) || !slices.Equal(failed, step.failed) {
					t.Errorf("at %v: %s %v, %s %v; want %v, %v", step.at, c.rows, rows, c.failed, failed, step.rows, step.failed)
				}
			}
			s.mu.Lock()
			d := s.gpuSlowdownAt(time.Duration(s.clock.Load()))
			s.mu.Unlock()
			if d != 1 {
				t.Errorf("a row remap slows the engine ×%v; it should not", d)
			}
		})
	}
}

func TestRowRemapFaultForms(t *testing.T) {
	for spec, want := range map[string]GPUFault{
		"row_remap:3":         {Kind: GPUFaultRowRemap, Rows: 3},
		"row_remap:failed@5s": {Kind: GPUFaultRowRemap, Failed: true, After: 5 * time.Second},
		"row_remap:1@1m":      {Kind: GPUFaultRowRemap, Rows: 1, After: time.Minute},
		`{"kind":"row_remap","rows":2,"failed":true,"gpu":1}`: {Kind: GPUFaultRowRemap, Rows: 2, Failed: true, GPU: 1},
	} {
		var got GPUFault
		var err error
		if spec[0] == '{' {
			err = json.Unmarshal([]byte(spec), &got)
		} else {
			got, err = ParseGPUFault(spec)
		}
		if err != nil || got != want {
			t.Errorf("%s: %+v %v", spec, got, err)
		}
		b, _ := json.Marshal(want)
		var back GPUFault
		if err := json.Unmarshal(b, &back); err != nil || back != want {
			t.Errorf("%s: round trip %s → %+v %v", spec, b, back, err)
		}
	}
	for _, bad := range []string{"row_remap", "row_remap:0", "row_remap:-1", "row_remap:many", "row_remap:failed:1"} {
		if _, err := ParseGPUFault(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	for _, bad := range []string{`{"kind":"xid","xid":79,"rows":1}`, `{"kind":"throttle","reason":"sw_thermal","failed":true}`, `{"kind":"row_remap","xid":64,"failed":true}`} {
		var f GPUFault
		if err := json.Unmarshal([]byte(bad), &f); err == nil {
			t.Errorf("%s accepted: %+v", bad, f)
		}
	}
}
