package daemon

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/vocab"
)

// TestServeProfileSGLangStallBoundsTheNext: the daemon frames an SGLang
// server (engine: sglang): one start with SGLang's body, the stop that
// freezes serving while it exports, this capture's per-rank file collected,
// the freeze measured in the run's JSON. A second alert on the same target
// is then skipped before any start: the first capture's stall, remembered
// in the database, is over the playbook's cost.max_last_stall.
func TestServeProfileSGLangStallBoundsTheNext(t *testing.T) {
	t.Parallel()
	sim := startPFSim(t, pfSimOpts{SGLang: true, ExportRate: 100e3})
	d := startPFDaemon(t, pfPlaybook(pfStep{Dir: sim.Dir, Duration: 2 * time.Second, StopTimeout: 30 * time.Second,
		Engine: "sglang", MaxLastStall: 200 * time.Millisecond}), time.Second, 10*time.Second)
	a := pfWaitRun(t, d, pfFire(t, d, "f00a5f00a5f00a01", sim.Inst, time.Now().Add(-time.Minute)))
	prof := pfMustStep(t, a, "profile")
	if prof.Status != vocab.StatusSucceeded {
		t.Fatalf("first capture %s (%s)", prof.Status, pfText(prof))
	}
	st := sim.profiler(t)
	if st.Engine != "sglang" || st.Starts != 1 || st.Stops != 1 || len(st.Stalls) != 1 || len(st.Files) != 1 {
		t.Fatalf("sim profiler %+v: want one SGLang capture with one freeze and its rank file", st)
	}
	if base := filepath.Base(st.Files[0]); !strings.HasPrefix(base, "autocapture-"+a.ID+"-profile-") || !strings.HasSuffix(base, "-TP-0.trace.json.gz") {
		t.Errorf("rank file %s: want this run's prefix and SGLang's name", base)
	}
	files, _ := prof.Findings["files"].([]any)
	if len(files) != 1 || files[0] != filepath.Base(st.Files[0]) {
		t.Errorf("collected %v, want %s", files, filepath.Base(st.Files[0]))
	}
	cost, _ := json.Marshal(prof.Findings["cost"])
	stall, _ := prof.Findings["stall_seconds"].(float64)
	t.Logf("capture: %s; the sim froze %v; cost %s", pfText(prof), st.Stalls[0].Stall, cost)
	if stall < 0.2 || !strings.Contains(pfText(prof), "cost: ") {
		t.Fatalf("stall %v s (cost %s): want the freeze measured over the 200ms bound", stall, cost)
	}

	b := pfWaitRun(t, d, pfFire(t, d, "f00a5f00a5f00b02", sim.Inst, time.Now().Add(-time.Minute)))
	s := pfMustStep(t, b, "profile")
	t.Logf("second alert: %s %q", s.Status, pfText(s))
	if s.Status != vocab.StatusSkipped || !strings.Contains(pfText(s), "over cost.max_last_stall 200ms") {
		t.Errorf("second capture %s %q: want skipped for the last stall", s.Status, pfText(s))
	}
	if n := sim.count("/start_profile"); n != 1 {
		t.Errorf("start_profile sent %d times, want 1", n)
	}
	sim.violations(t, nil)
}
