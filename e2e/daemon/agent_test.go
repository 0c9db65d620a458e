package daemon

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/agent"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/vllmsim"
)

// startAgent runs `autocapture agent` over dir on a loopback port.
func startAgent(t *testing.T, dir, token string) (*testenv.Process, string) {
	t.Helper()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := testenv.BuildBinary(t, "./cmd/autocapture")
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	p := testenv.StartProcess(t, "autocapture-agent", exec.Command(bin, "agent", "--profiler.dir", dir,
		"--web.listen-address", addr, "--web.token-file", tokenFile, "--log.level", "debug"))
	p.WaitHTTP(t, "http://"+addr+"/healthz", 30*time.Second)
	return p, "http://" + addr
}

// TestAgentServesAProfile: the agent as its own process over the folder an
// armed vllmsim writes its profile into; the client lists what appeared since
// before the start (not the older file), streams each byte-for-byte, removes
// one, and a wrong token is refused with a clear error.
func TestAgentServesAProfile(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	old := filepath.Join(dir, "old.pt.trace.json.gz")
	if err := os.WriteFile(old, []byte("an earlier capture"), 0o644); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour)
	if err := os.Chtimes(old, past, past); err != nil {
		t.Fatal(err)
	}
	const token = "agent-e2e-token"
	proc, url := startAgent(t, dir, token)
	c := &agent.Client{URL: url, Token: token}

	before, err := c.Snapshot(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(before.Files) != 1 || before.Files[0].Name != "old.pt.trace.json.gz" {
		t.Fatalf("before the frame: %+v", before.Files)
	}

	sim, err := vllmsim.New(vllmsim.Options{ProfilerDir: dir, ProfilerFlushDelay: 100 * time.Millisecond, TensorParallel: 2, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	vllm := httptest.NewServer(sim.Handler())
	defer vllm.Close()
	postVLLM(t, vllm.URL+"/start_profile")
	sim.Advance(2 * time.Second)
	postVLLM(t, vllm.URL+"/stop_profile")

	var want []string
	for _, p := range sim.Profiler().Files {
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, filepath.ToSlash(rel))
	}
	slices.Sort(want)
	want = slices.Compact(want)
	if len(want) < 3 {
		t.Fatalf("vllmsim wrote %v", want)
	}

	after, err := c.Snapshot(ctx, before.Now)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range after.Files {
		got = append(got, f.Name)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("listed since the start: %v, want what vllmsim wrote: %v", got, want)
	}
	for _, f := range after.Files {
		disk := sha256File(t, filepath.Join(dir, filepath.FromSlash(f.Name)))
		rc, err := c.Open(ctx, f.Name)
		if err != nil {
			t.Fatalf("open %s: %v", f.Name, err)
		}
		h := sha256.New()
		n, err := io.Copy(h, rc)
		rc.Close()
		if err != nil || n != f.Size || [32]byte(h.Sum(nil)) != disk {
			t.Errorf("%s: streamed %d bytes (listed %d), err %v, digest equal %v", f.Name, n, f.Size, err, [32]byte(h.Sum(nil)) == disk)
		}
	}

	gone := after.Files[0].Name
	if err := c.Remove(ctx, gone); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, gone)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("removed %s is still on disk: %v", gone, err)
	}
	if _, err := c.Open(ctx, gone); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("open after remove: %v, want ErrNotFound", err)
	}

	_, err = (&agent.Client{URL: url, Token: "wrong"}).List(ctx, time.Time{})
	if !errors.Is(err, agent.ErrUnauthorized) || !strings.Contains(err.Error(), "token") {
		t.Errorf("wrong token: %v, want ErrUnauthorized naming the token", err)
	}

	proc.Stop()
	if err := proc.Err(); err != nil {
		t.Errorf("SIGTERM: agent exited with %v, want status 0", err)
	}
	logs := proc.Logs()
	for _, line := range []string{"Agent listening.", "File served.", "File removed.", "Request refused: not authenticated.", "Stopped."} {
		if !strings.Contains(logs, line) {
			t.Errorf("the agent's log lacks %q", line)
		}
	}
	if strings.Contains(logs, token) {
		t.Error("the agent logged its token")
	}
}

func postVLLM(t *testing.T, url string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %d", url, resp.StatusCode)
	}
}

func sha256File(t *testing.T, p string) [32]byte {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return [32]byte(h.Sum(nil))
}

// TestAgentRefusesToStart: without a usable token or folder the agent exits
// non-zero, says which flag is wrong, and never listens.
func TestAgentRefusesToStart(t *testing.T) {
	t.Parallel()
	bin := testenv.BuildBinary(t, "./cmd/autocapture")
	dir := t.TempDir()
	files := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(files, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", "tok")
	unreadable := write("unreadable", "tok")
	if err := os.Chmod(unreadable, 0); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no token file flag", []string{"--profiler.dir", dir}, "--web.token-file is required"},
		{"missing token file", []string{"--profiler.dir", dir, "--web.token-file", filepath.Join(files, "nope")}, "--web.token-file: open"},
		{"empty token file", []string{"--profiler.dir", dir, "--web.token-file", write("empty", "")}, "is empty"},
		{"whitespace token file", []string{"--profiler.dir", dir, "--web.token-file", write("blank", " \n\t\n")}, "is empty"},
		{"no dir", []string{"--web.token-file", good}, "--profiler.dir is required"},
		{"missing dir", []string{"--profiler.dir", filepath.Join(dir, "nope"), "--web.token-file", good}, "--profiler.dir: stat"},
		{"dir is a file", []string{"--profiler.dir", good, "--web.token-file", good}, "is not a directory"},
	}
	if os.Geteuid() != 0 { // root reads a mode-0 file
		tests = append(tests, struct {
			name string
			args []string
			want string
		}{"unreadable token file", []string{"--profiler.dir", dir, "--web.token-file", unreadable}, "permission denied"})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			port := testenv.FreePort(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			args := append([]string{"agent", "--web.listen-address", fmt.Sprintf("127.0.0.1:%d", port)}, tt.args...)
			out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() == 0 {
				t.Fatalf("exit %v, want a non-zero status; output:\n%s", err, out)
			}
			if !strings.Contains(string(out), tt.want) {
				t.Errorf("output %q does not say %q", out, tt.want)
			}
			if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
				c.Close()
				t.Error("something listens on the agent's port")
			}
		})
	}
}
