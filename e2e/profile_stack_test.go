package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/playbooks/vllm"
	"github.com/autocapture/autocapture/vllmsim"
)

// shippedAgentPort is where the shipped vllm-profile preset looks for the
// autocapture agent: the alert instance's host, port 9101.
const shippedAgentPort = 9101

// profileModel is the model every profiled sim serves: captures are compared
// by the alert's model_name, so the healthy baseline and the regression must
// share it.
const profileModel = "e2e-profiled"

// profileStack is a stack whose unexplained sim has a loopback address of its
// own (127.0.0.x), an armed profiler, and a real `autocapture agent` process
// on that address's port 9101 serving the profiler's folder, as the shipped
// preset expects of a pod with its sidecar.
type profileStack struct {
	*stack
	AgentHost string            // the unexplained sim's own loopback address
	Agent     *testenv.Process  // autocapture agent on AgentHost:9101
	Dirs      map[string]string // scenario → its sim's --profiler-dir
}

// profileStackOptions say what a profileStack runs beside the unexplained sim.
type profileStackOptions struct {
	Scenarios []string // profiled sims; the unexplained one gets the agent
	// Playbooks gives extra playbook files (name → YAML), from the sims'
	// profiler folders, loaded beside the shipped ones; Shipped false loads
	// only these (and the shipped presets).
	Playbooks func(dirs map[string]string) map[string]string
	Shipped   bool
	// Profiling is extra lines of the daemon's profiling: block (indented).
	Profiling string
	// DaemonConfig is extra YAML after the profiling: block.
	DaemonConfig string
	S3           *testenv.S3Server
	// Unarmed starts the sims without --profiler-dir (start_profile answers
	// 404); the agent still serves the (empty) folder.
	Unarmed bool
}

// startProfileStack starts the agent first (it needs only the folder), then
// the stack, the daemon configured with the agent's token and a 1 s sweep.
func startProfileStack(t testing.TB, o profileStackOptions) *profileStack {
	t.Helper()
	dir := t.TempDir()
	ps := &profileStack{AgentHost: loopbackWithPort(t, shippedAgentPort), Dirs: map[string]string{}}
	hosts := map[string]string{vllmsim.ScenarioUnexplained: ps.AgentHost}
	args := map[string][]string{}
	for _, sc := range o.Scenarios {
		ps.Dirs[sc] = filepath.Join(dir, "profiles-"+sc)
		if err := os.MkdirAll(ps.Dirs[sc], 0o755); err != nil {
			t.Fatal(err)
		}
		args[sc] = []string{"--model=" + profileModel}
		if !o.Unarmed {
			args[sc] = append(args[sc], "--profiler-dir="+ps.Dirs[sc])
		}
	}
	tokenFile := filepath.Join(dir, "agent-token")
	if err := os.WriteFile(tokenFile, []byte("e2e-agent-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := testenv.BuildBinary(t, "./cmd/autocapture")
	agentAddr := net.JoinHostPort(ps.AgentHost, strconv.Itoa(shippedAgentPort))
	ps.Agent = testenv.StartProcess(t, "autocapture-agent", exec.Command(bin, "agent",
		"--dir="+ps.Dirs[vllmsim.ScenarioUnexplained], "--listen="+agentAddr, "--token-file="+tokenFile))
	ps.Agent.WaitHTTP(t, "http://"+agentAddr+"/healthz", 15*time.Second)

	pbDir := filepath.Join(dir, "playbooks")
	var extra map[string]string
	if o.Playbooks != nil {
		extra = o.Playbooks(ps.Dirs)
	}
	writePlaybooks(t, pbDir, o.Shipped, extra)
	// The test's playbooks alone: a shipped one answering another alert the
	// sims trip would frame profiles of its own on them.
	cfg := fmt.Sprintf("profiling:\n  agent_token_file: %s\n  sweep_interval: 1s\n%splaybooks: [%s]\nshipped_playbooks: false\n%s", tokenFile, o.Profiling, pbDir, o.DaemonConfig)
	ps.stack = startStack(t, stackOptions{Scenarios: o.Scenarios, S3: o.S3, SimHost: hosts, SimArgs: args, DaemonConfig: cfg})
	return ps
}

// writePlaybooks copies the shipped playbooks byte for byte (or only their
// presets) into dir and adds extra.
func writePlaybooks(t testing.TB, dir string, shipped bool, extra map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	names, err := fs.Glob(vllm.FS, "*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if !shipped && n != "presets.yaml" {
			continue
		}
		b, err := vllm.FS.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for n, body := range extra {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// loopbackWithPort picks a 127.0.0.x (x ≥ 2, from a random start so parallel
// test processes rarely collide) on which port is free.
func loopbackWithPort(t testing.TB, port int) string {
	t.Helper()
	start := 2 + rand.IntN(200)
	for i := range 250 {
		host := fmt.Sprintf("127.0.0.%d", 2+(start-2+i)%250)
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err == nil {
			l.Close()
			return host
		}
	}
	t.Fatalf("no 127.0.0.x with port %d free", port)
	return ""
}

// profilerStatus reads a sim's GET /admin/profiler.
func (sm *sim) profilerStatus(t testing.TB) vllmsim.ProfilerStatus {
	t.Helper()
	resp, err := http.Get("http://" + sm.Addr + "/admin/profiler")
	if err != nil {
		t.Fatalf("sim %s: /admin/profiler: %v", sm.Scenario, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var st vllmsim.ProfilerStatus
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("sim %s: /admin/profiler: %v: %s", sm.Scenario, err, body)
	}
	return st
}
