package vllmsim

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestFleetSharesScenariosAndIdentity builds a fleet of 4 in virtual time at
// 1 req/s each (the healthy traffic's mix; at healthy's 2.5 a 3× share, 7.5
// req/s, would saturate the engine's ~4.3 and cap the rate): instance 1
// overloaded, instance 2 with 3× the share, instance 3 with an XID after 30 s. Each instance's request rate, measured from its own
// request_success_total, follows its share; each has its own seed (different
// requests), its own node, and spans carrying its address as
// service.instance.id.
func TestFleetSharesScenariosAndIdentity(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	var insts []InstanceOptions
	for i := range 4 {
		insts = append(insts, InstanceOptions{Addr: fmt.Sprintf("127.0.0.%d:8000", 11+i)})
	}
	insts[1].Scenario = ScenarioOverload
	insts[2].Share = 3
	insts[3].GPUFaults = []GPUFault{{Kind: GPUFaultXID, XID: 79, After: 30 * time.Second}}
	f, err := NewFleet(FleetOptions{Base: Options{Model: "m", Seed: 11, Load: 1, SpanExporter: exp, Start: time.Unix(1.8e9, 0)}, Instances: insts})
	if err != nil {
		t.Fatal(err)
	}
	f.Advance(10 * time.Second) // warm-up
	before := make([]float64, 4)
	for i, in := range f.Instances {
		before[i] = takeSnapshot(t, in.Sim).value("vllm:request_success_total", "", "")
	}
	f.Advance(60 * time.Second)
	rate := make([]float64, 4)
	for i, in := range f.Instances {
		rate[i] = (takeSnapshot(t, in.Sim).value("vllm:request_success_total", "", "") - before[i]) / 60
	}
	t.Logf("finished req/s per instance: %.2f", rate)
	for _, i := range []int{0, 3} {
		if rate[i] < 0.7 || rate[i] > 1.3 {
			t.Errorf("instance %d: %.2f req/s, want ~1 (share 1)", i, rate[i])
		}
	}
	if r := rate[2] / rate[0]; r < 2.4 || r > 3.6 {
		t.Errorf("share 3: %.2f req/s vs %.2f, ratio %.2f, want ~3", rate[2], rate[0], r)
	}
	if st := f.Instances[1].State(); st.Scenario != ScenarioOverload || st.Load.RPS != 1 {
		t.Errorf("instance 1: %s at %v req/s, want overload at the base load", st.Scenario, st.Load.RPS)
	}
	if a, b := f.Instances[0].Requests()[0].ID, f.Instances[3].Requests()[0].ID; a == b {
		t.Errorf("instances 0 and 3 drew the same first request %s: seeds not derived", a)
	}
	for i, in := range f.Instances {
		d := scrapeDCGM(t, in.DCGMHandler())["DCGM_FI_DEV_XID_ERRORS"].samples[0]
		wantXID := map[bool]string{true: "79", false: "0"}[i == 3]
		if d.values["Hostname"] != fmt.Sprintf("node-%d", i) || d.value != wantXID {
			t.Errorf("instance %d: DCGM Hostname %s XID %s", i, d.values["Hostname"], d.value)
		}
	}
	byInstance := map[string]int{}
	for _, in := range f.Instances {
		if err := in.spans.flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for _, sp := range exp.GetSpans() {
		for _, kv := range sp.Resource.Attributes() {
			if kv.Key == "service.instance.id" {
				byInstance[kv.Value.AsString()]++
			}
		}
	}
	for _, io := range insts {
		if byInstance[io.Addr] == 0 {
			t.Errorf("no span with service.instance.id=%s (%v)", io.Addr, byInstance)
		}
	}
	if len(byInstance) != 4 {
		t.Errorf("service.instance.id values %v", byInstance)
	}
	if err := f.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestFleetOptionsRefused(t *testing.T) {
	for name, fo := range map[string]FleetOptions{
		"no instances":   {},
		"negative share": {Instances: []InstanceOptions{{Share: -1}}},
		"bad scenario":   {Instances: []InstanceOptions{{Scenario: "nope"}}},
		"fault on gpu 1": {Instances: []InstanceOptions{{GPUFaults: []GPUFault{{Kind: GPUFaultXID, XID: 79, GPU: 1}}}}},
	} {
		if _, err := NewFleet(fo); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestSGLangFleet: a fleet whose Base.Engine is sglang presents SGLang on
// every instance (/metrics, spans with each instance's service.instance.id,
// State and GET /admin/scenario naming the engine and era), with the
// per-instance scenarios showing in SGLang's series: the overloaded
// instance's num_queue_reqs grows, the others' does not.
func TestSGLangFleet(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	insts := []InstanceOptions{{Addr: "127.0.0.11:30000"}, {Addr: "127.0.0.12:30000", Scenario: ScenarioOverload}}
	f, err := NewFleet(FleetOptions{Base: Options{Engine: EngineSGLang, Model: "m", Seed: 11, SpanExporter: exp, Start: time.Unix(1.8e9, 0)}, Instances: insts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close(context.Background()) })
	f.Advance(30 * time.Second)
	if q0, q1 := sglValue(f.Instances[0].Sim, "sglang:num_queue_reqs", "", ""), sglValue(f.Instances[1].Sim, "sglang:num_queue_reqs", "", ""); q0 > 5 || q1 < 50 {
		t.Errorf("num_queue_reqs: healthy instance %v, overloaded instance %v", q0, q1)
	}
	for i, in := range f.Instances {
		if st := in.State(); st.Engine != EngineSGLang || st.SGLangEra != SGLangEra2026 {
			t.Errorf("instance %d: state engine %q era %q", i, st.Engine, st.SGLangEra)
		}
		rec := httptest.NewRecorder()
		in.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/admin/scenario", nil))
		if !strings.Contains(rec.Body.String(), `"engine":"sglang","sglang_era":"2026"`) {
			t.Errorf("instance %d: GET /admin/scenario %.300s", i, rec.Body.String())
		}
	}
	for _, in := range f.Instances {
		if err := in.spans.flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	for _, sp := range exp.GetSpans().Snapshots() {
		if !strings.HasPrefix(sp.Name(), "Req ") {
			continue
		}
		for _, kv := range sp.Resource().Attributes() {
			if kv.Key == "service.instance.id" {
				seen[kv.Value.AsString()] = true
			}
		}
		if sn, _ := sp.Resource().Set().Value("service.name"); sn.AsString() != "sglang" {
			t.Fatalf("service.name %q", sn.AsString())
		}
	}
	if !seen["127.0.0.11:30000"] || !seen["127.0.0.12:30000"] {
		t.Errorf("root spans from instances %v, want both", seen)
	}
}
