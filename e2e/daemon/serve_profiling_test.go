package daemon

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
)

// TestServeProfilingWiring: the daemon serves tier 3's kill switches on its
// runs store (a pause is persisted and shown with who asked, and exported as a
// metric), and refuses to start with an empty profiling.agent_token_file.
func TestServeProfilingWiring(t *testing.T) {
	t.Parallel()
	bin := testenv.BuildBinary(t, "./cmd/autocapture")
	dir := t.TempDir()
	empty, cfg := filepath.Join(dir, "empty-token"), filepath.Join(dir, "c.yaml")
	os.WriteFile(empty, []byte("\n"), 0o600)
	os.WriteFile(cfg, []byte("profiling:\n  agent_token_file: "+empty+"\nplaybooks: []\n"), 0o600)
	p := testenv.StartProcess(t, "autocapture-empty-agent-token", exec.Command(bin, "serve", "--config.file", cfg, "--storage.path", dir))
	select {
	case <-p.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not exit")
	}
	if logs := p.Logs(); p.Err() == nil || !strings.Contains(logs, "profiling.agent_token_file") || !strings.Contains(logs, empty) {
		t.Fatalf("serve with an empty agent_token_file: err %v, logs:\n%s", p.Err(), logs)
	}

	port := testenv.FreePort(t)
	os.WriteFile(cfg, []byte("profiling:\n  agent_token: tok\n  max_concurrent: 2\nplaybooks: []\n"), 0o600)
	p = testenv.StartProcess(t, "autocapture-profiling", exec.Command(bin, "serve", "--config.file", cfg, "--storage.path", dir,
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port)))
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	p.WaitHTTP(t, base+"/-/ready", 30*time.Second)
	resp, err := http.Post(base+"/api/v1/profiling/pause", "application/json", strings.NewReader(`{"reason":"maintenance"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("pause: %d", resp.StatusCode)
	}
	resp, err = http.Get(base + "/api/v1/profiling")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Paused   bool   `json:"paused"`
		PausedBy string `json:"paused_by"`
		Reason   string `json:"reason"`
		Budget   struct {
			MaxConcurrent int `json:"max_concurrent"`
		} `json:"budget"`
	}
	json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if !st.Paused || st.PausedBy != "127.0.0.1" || st.Reason != "maintenance" || st.Budget.MaxConcurrent != 2 {
		t.Fatalf("status %+v: want paused by 127.0.0.1 for maintenance, max_concurrent 2 from the config", st)
	}
	resp, err = http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"autocapture_profiling_paused 1", `autocapture_profile_leases{state="recording"} 0`, "autocapture_profile_sweeps_total"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
