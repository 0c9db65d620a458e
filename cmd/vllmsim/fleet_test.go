package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
)

// TestServeFleet starts a fleet of 4 on loopback ports, each with its DCGM
// surface, and reads every instance: 4 distinct addresses, the per-instance
// scenario and share in each one's state, the model label on each /metrics,
// each node's Hostname and the GPU faults on the DCGM surfaces.
func TestServeFleet(t *testing.T) {
	four := "127.0.0.1:0,127.0.0.1:0,127.0.0.1:0,127.0.0.1:0"
	addrs, stop := startRun(t, "--fleet-listen", four, "--dcgm-listen", four, "--model", "m", "--scenario", "healthy",
		"--instance-scenario", "1=overload", "--instance-share", "2=3", "--instance-gpu", "1=throttle:sw_thermal",
		"--instance-gpu", "3=xid:79")
	get := func(addr, path string) string { return httpGet(t, "http://"+addr+path) }
	if len(addrs.VLLM) != 4 || len(addrs.DCGM) != 4 {
		t.Fatalf("served %+v", addrs)
	}
	seen := map[string]bool{}
	for _, a := range append(addrs.VLLM, addrs.DCGM...) {
		seen[a] = true
	}
	if len(seen) != 8 {
		t.Fatalf("addresses not distinct: %+v", addrs)
	}
	for i, a := range addrs.VLLM {
		var st struct {
			Scenario string `json:"scenario"`
			Load     struct {
				RPS float64 `json:"rps"`
			} `json:"load"`
		}
		if err := json.Unmarshal([]byte(get(a, "/admin/scenario")), &st); err != nil {
			t.Fatal(err)
		}
		wantSc, wantRPS := "healthy", 2.5
		switch i {
		case 1:
			wantSc, wantRPS = "overload", 14
		case 2:
			wantRPS = 7.5
		}
		if st.Scenario != wantSc || st.Load.RPS != wantRPS {
			t.Errorf("instance %d: scenario %s at %v req/s, want %s at %v", i, st.Scenario, st.Load.RPS, wantSc, wantRPS)
		}
		if m := get(a, "/metrics"); !strings.Contains(m, `vllm:num_requests_running{engine="0",model_name="m"}`) {
			t.Errorf("instance %d: /metrics without model_name m", i)
		}
		d := get(addrs.DCGM[i], "/metrics")
		if !strings.Contains(d, fmt.Sprintf(`Hostname="node-%d"`, i)) {
			t.Errorf("instance %d: DCGM without Hostname node-%d", i, i)
		}
		xid, clock := "} 0\n", "DCGM_FI_DEV_SM_CLOCK{"
		if i == 3 {
			xid = `err_code="79",err_msg="GPU has fallen off the bus"} 79` + "\n"
		}
		if !strings.Contains(d, xid) || !strings.Contains(d, clock) {
			t.Errorf("instance %d: DCGM XID/clock wrong:\n%.3000s", i, d)
		}
		wantClock := "} 1980\n"
		if i == 1 {
			wantClock = "} 1089\n"
		}
		if line := lineOf(d, "DCGM_FI_DEV_SM_CLOCK{"); !strings.HasSuffix(line+"\n", wantClock) {
			t.Errorf("instance %d: %s, want SM clock%s", i, line, wantClock)
		}
	}
	stop()
}

func lineOf(text, prefix string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

func TestFleetFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--fleet-listen", "127.0.0.1:0,127.0.0.1:0", "--dcgm-listen", "127.0.0.1:0"},
		{"--fleet-listen", "127.0.0.1:0", "--instance-share", "1=2"},
		{"--instance-scenario", "0=nope"},
		{"--instance-share", "0=-1"},
		{"--instance-gpu", "0=throttle:too_hot"},
		{"--instance-gpu", "0=xid:79@soon"},
		{"--instance-gpu", "x=xid:79"},
		{"--dcgm-names", "5.0"},
		{"--dcgm-sentinel", "DCGM_FI_DEV_NOPE"},
		{"--dcgm-listen", "127.0.0.1:0,127.0.0.1:0"},
	} {
		if err := run(context.Background(), args, io.Discard, nil); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

// TestServeSingleWithDCGM: without --fleet-listen, one instance and one DCGM
// surface, shaped by the DCGM flags.
func TestServeSingleWithDCGM(t *testing.T) {
	addrs, stop := startRun(t, "--web.listen-address", "127.0.0.1:0", "--dcgm-listen", "127.0.0.1:0", "--load", "-1",
		"--dcgm-names", "4.9", "--dcgm-pod-mapping", "--dcgm-clock-events=false", "--dcgm-sentinel", "DCGM_FI_DEV_MEMORY_TEMP",
		"--instance-gpu", "0=throttle:power_cap")
	if len(addrs.VLLM) != 1 || len(addrs.DCGM) != 1 {
		t.Fatalf("served %+v", addrs)
	}
	d := httpGet(t, "http://"+addrs.DCGM[0]+"/metrics")
	for _, want := range []string{`hostname="node-0",DCGM_FI_SYSTEM_DRIVER_VERSION="550.54.15",container="vllm",namespace="default",pod="vllm-0",pod_uid=""} 1386000000` + "\n",
		"DCGM_FI_DEV_MEMORY_TEMP_CELSIUS{", "} 9223372036854775794\n"} {
		if !strings.Contains(d, want) {
			t.Errorf("DCGM without %q:\n%.1500s", want, d)
		}
	}
	if strings.Contains(d, "CLOCKS_EVENT_REASONS") || strings.Contains(d, "DCGM_FI_DEV_SM_CLOCK{") {
		t.Errorf("clock events or classic names present:\n%.1500s", d)
	}
	stop()
}
