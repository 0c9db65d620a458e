package vllmsim

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/autocapture/autocapture/internal/testkit/fixtures"
)

// The real traces the simulator's new shapes are held to (SOURCES.md under
// llm-traces/): vLLM V1's piecewise CUDA-graph replay on an MI300X, and HF
// transformers on an H100 with driver-API launches and kernels launched
// before the recording.
const (
	realPiecewise = "llm-traces/vllm_gpt-oss_mi300x_prefilldecode_piecewise.CUT.json.gz"
	realHF        = "llm-traces/hf_qwen1.5-0.5b-chat_h100_forward.json.gz"
)

type tevent struct {
	Ph, Cat, Name string
	Ts            float64
	ID            json.Number `json:"id"`
	Args          map[string]any
}

type tdoc struct {
	Devices []map[string]any `json:"deviceProperties"`
	Events  []tevent         `json:"traceEvents"`
	// the rows by role, filled by index
	launches map[int64]tevent // cuda_runtime / cuda_driver rows by correlation
	gpu      []tevent         // kernel, gpu_memcpy, gpu_memset rows by ts
	flowEnds map[int64]int    // "f" ac2g rows by id
	flowBegs map[int64]int
}

// loadTrace reads a gzipped trace and indexes its rows.
func loadTrace(t *testing.T, gz []byte) *tdoc {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	var d tdoc
	if err := json.NewDecoder(zr).Decode(&d); err != nil {
		t.Fatal(err)
	}
	d.launches, d.flowEnds, d.flowBegs = map[int64]tevent{}, map[int64]int{}, map[int64]int{}
	for _, e := range d.Events {
		switch {
		case e.Cat == "cuda_runtime" || e.Cat == "cuda_driver":
			if c, ok := intArg(e, "correlation"); ok {
				d.launches[c] = e
			}
		case e.Cat == "kernel" || e.Cat == "gpu_memcpy" || e.Cat == "gpu_memset":
			d.gpu = append(d.gpu, e)
		case e.Cat == "ac2g":
			id, _ := e.ID.Int64()
			if e.Ph == "f" {
				d.flowEnds[id]++
			} else {
				d.flowBegs[id]++
			}
		}
	}
	sort.SliceStable(d.gpu, func(i, j int) bool { return d.gpu[i].Ts < d.gpu[j].Ts })
	return &d
}

func intArg(e tevent, k string) (int64, bool) {
	f, ok := e.Args[k].(float64)
	return int64(f), ok
}

func argKeys(e tevent) []string { return slices.Sorted(maps.Keys(e.Args)) }

// simTrace records a frame starting mid-iteration (so kernels launched
// before it run inside it) and returns rank 0's trace.
func simTrace(t *testing.T, o Options) *tdoc {
	t.Helper()
	o.Seed, o.ProfilerLayers = 7, 2
	files, _ := frame(t, o, 15*time.Second+17300*time.Microsecond, 2*time.Second+3100*time.Microsecond)
	gz, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	return loadTrace(t, gz)
}

// graphShape is what a trace's graph launches look like: the launch rows'
// and their kernels' arg keys; it fails where a graph launch carries no
// kernel, a replayed kernel has a launch row of its own, an External id or
// no flow end.
func graphShape(t *testing.T, name string, d *tdoc, launch string) (launchKeys, kernelKeys []string) {
	t.Helper()
	graphs := 0
	kernels := map[int64][]tevent{}
	for _, k := range d.gpu {
		c, _ := intArg(k, "correlation")
		kernels[c] = append(kernels[c], k)
	}
	for c, l := range d.launches {
		if l.Name != launch {
			continue
		}
		graphs++
		launchKeys = argKeys(l)
		ks := kernels[c]
		if len(ks) == 0 {
			t.Errorf("%s: %s correlation %d carries no kernel", name, launch, c)
		}
		for _, k := range ks {
			if _, ok := k.Args["External id"]; ok {
				t.Errorf("%s: graph-replayed %q has an External id", name, k.Name)
			}
			if d.flowEnds[c] == 0 {
				t.Errorf("%s: graph-replayed %q has no ac2g flow end", name, k.Name)
			}
			kernelKeys = argKeys(k)
		}
	}
	if graphs == 0 {
		t.Fatalf("%s: no %s row", name, launch)
	}
	return launchKeys, kernelKeys
}

// TestGraphReplayAsTheRealTrace: the sim's decode steps replay from
// cudaGraphLaunch rows laid out as the real vLLM trace's hipGraphLaunch
// rows: a launch row with only its callback id and correlation, that
// correlation on every kernel it replays, which have no External id, no
// launch row of their own, and keep a flow end; the replayed kernels'
// keys are an eager kernel's without the External id.
func TestGraphReplayAsTheRealTrace(t *testing.T) {
	real := loadTrace(t, fixtures.Read(t, realPiecewise))
	sim := simTrace(t, Options{Scenario: ScenarioHealthy})
	rl, rk := graphShape(t, "real", real, "hipGraphLaunch")
	sl, sk := graphShape(t, "sim", sim, "cudaGraphLaunch")
	// ROCm's callback id is "cid", CUPTI's "cbid".
	if want := []string{"cbid", "correlation"}; !slices.Equal(rl, []string{"cid", "correlation"}) || !slices.Equal(sl, want) {
		t.Errorf("graph launch args: real %v, sim %v, want %v", rl, sl, want)
	}
	for name, d := range map[string]*tdoc{"real": real, "sim": sim} {
		keys := map[string]bool{}
		for _, k := range d.gpu {
			if _, ok := k.Args["External id"]; ok && k.Cat == "kernel" {
				for _, key := range argKeys(k) {
					keys[key] = true
				}
			}
		}
		kk := rk
		if name == "sim" {
			kk = sk
		}
		for _, key := range kk {
			if !keys[key] {
				t.Errorf("%s: graph kernels' key %q is not an eager kernel's", name, key)
			}
		}
	}
	if len(sk) != len(simEagerKeys(sim))-1 {
		t.Errorf("sim graph kernel keys %v, want an eager kernel's %v less the External id", sk, simEagerKeys(sim))
	}
}

func simEagerKeys(d *tdoc) []string {
	for _, k := range d.gpu {
		if _, ok := k.Args["External id"]; ok && k.Cat == "kernel" {
			return argKeys(k)
		}
	}
	return nil
}

// TestDriverLaunchesAsTheRealTrace: the sim's Triton kernels are launched
// through the driver API as the HF H100 trace's cuLaunchKernel row is: the
// same category, name, arg keys and callback id, the kernel carrying the
// launch's correlation and External id, a flow from one to the other.
func TestDriverLaunchesAsTheRealTrace(t *testing.T) {
	real := loadTrace(t, fixtures.Read(t, realHF))
	sim := simTrace(t, Options{Scenario: ScenarioHealthy, EnforceEager: true})
	shape := func(name string, d *tdoc) (tevent, int) {
		var row tevent
		n := 0
		for _, k := range d.gpu {
			c, _ := intArg(k, "correlation")
			l, ok := d.launches[c]
			if !ok || l.Cat != "cuda_driver" {
				continue
			}
			n++
			row = l
			if ke, le := k.Args["External id"], l.Args["External id"]; ke == nil || ke != le {
				t.Errorf("%s: %q External id %v, its driver launch's %v", name, k.Name, ke, le)
			}
			if d.flowBegs[c] != 1 || d.flowEnds[c] != 1 {
				t.Errorf("%s: correlation %d: %d flow starts, %d ends, want one each", name, c, d.flowBegs[c], d.flowEnds[c])
			}
		}
		if n == 0 {
			t.Fatalf("%s: no kernel launched through the driver API", name)
		}
		return row, n
	}
	r, _ := shape("real", real)
	s, n := shape("sim", sim)
	if s.Name != r.Name || !slices.Equal(argKeys(s), argKeys(r)) || s.Args["cbid"] != r.Args["cbid"] {
		t.Errorf("sim driver launch %s %v, the real one %s %v", s.Name, s.Args, r.Name, r.Args)
	}
	t.Logf("%d driver launches in the sim's frame", n)
}

// TestPreRecordingKernelsAsTheRealTrace: as in the HF trace, the sim's
// first GPU rows are kernels launched before the recording: their
// correlations have no launch row in the file, they carry no External id
// and keep a flow end without a flow start; the rest have launch rows.
func TestPreRecordingKernelsAsTheRealTrace(t *testing.T) {
	real := loadTrace(t, fixtures.Read(t, realHF))
	sim := simTrace(t, Options{Scenario: ScenarioUnexplained, EnforceEager: true})
	for name, d := range map[string]*tdoc{"real": real, "sim": sim} {
		pre, launched := 0, 0
		for _, k := range d.gpu {
			c, _ := intArg(k, "correlation")
			if _, ok := d.launches[c]; ok {
				launched++
				continue
			}
			if launched > 0 {
				t.Errorf("%s: %q (correlation %d) has no launch row but runs after launched kernels", name, k.Name, c)
				break
			}
			pre++
			if _, ok := k.Args["External id"]; ok || d.flowEnds[c] != 1 || d.flowBegs[c] != 0 {
				t.Errorf("%s: pre-recording %q: args %v, flow ends %d, starts %d", name, k.Name, argKeys(k), d.flowEnds[c], d.flowBegs[c])
			}
		}
		if pre == 0 || launched == 0 {
			t.Errorf("%s: %d pre-recording GPU rows, %d launched ones: want both", name, pre, launched)
		}
		t.Logf("%s: %d pre-recording GPU rows first, then %d launched", name, pre, launched)
	}
}

// TestB200TraceAsBlackwellWritesIt: the b200 option's header has the keys
// a current Kineto writes for a Hopper-or-later device (the HF H100
// trace's) with a B200's values, and its GEMMs and attention are
// Blackwell's kernels, none of the Ampere ones.
func TestB200TraceAsBlackwellWritesIt(t *testing.T) {
	real := loadTrace(t, fixtures.Read(t, realHF))
	sim := simTrace(t, Options{Scenario: ScenarioHealthy, ProfilerGPU: GPUB200})
	if len(sim.Devices) != 1 || len(real.Devices) != 1 {
		t.Fatalf("deviceProperties: sim %v, real %v", sim.Devices, real.Devices)
	}
	dev := sim.Devices[0]
	if got, want := slices.Sorted(maps.Keys(dev)), slices.Sorted(maps.Keys(real.Devices[0])); !slices.Equal(got, want) {
		t.Errorf("B200 deviceProperties keys %v, the H100's %v", got, want)
	}
	if dev["name"] != "NVIDIA B200" || dev["computeMajor"] != 10.0 || dev["numSms"] != 148.0 {
		t.Errorf("B200 deviceProperties %v", dev)
	}
	seen := map[string]int{}
	for _, k := range sim.gpu {
		for _, p := range []string{"nvjet_tst_", "bmm_E2m1_", "bmm_Bfloat16_", "fmhaSm100f", "ampere_", "cutlass", "flash_fwd"} {
			if len(k.Name) >= len(p) && k.Name[:len(p)] == p || p == "cutlass" && bytes.Contains([]byte(k.Name), []byte(p)) {
				seen[p]++
			}
		}
	}
	for _, p := range []string{"nvjet_tst_", "bmm_E2m1_", "bmm_Bfloat16_", "fmhaSm100f"} {
		if seen[p] == 0 {
			t.Errorf("no %s kernel in the B200 trace: %v", p, seen)
		}
	}
	for _, p := range []string{"ampere_", "cutlass", "flash_fwd"} {
		if seen[p] != 0 {
			t.Errorf("%d Ampere %s kernels in the B200 trace", seen[p], p)
		}
	}
}
