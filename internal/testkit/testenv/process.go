package testenv

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Process is a child process started by StartProcess: in its own process
// group, its output in a log file, stopped when the test ends.
type Process struct {
	// Cmd is the started command; do not Wait on it (the Process does).
	Cmd *exec.Cmd
	// Name names the process in messages.
	Name string
	// LogPath is the file holding its stdout and stderr.
	LogPath string

	done    chan struct{}
	waitErr error
}

// StartProcess starts cmd in its own process group with stdout and stderr
// going to a log file in t.TempDir() (and to cmd.Stdout/cmd.Stderr too when
// the caller set them). When the test ends the whole group gets SIGTERM, then
// SIGKILL after 5 s, and the process is waited for; if the test failed, the
// tail of the log is printed.
func StartProcess(t testing.TB, name string, cmd *exec.Cmd) *Process {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), sanitize(name)+".log")
	p, err := startProcess(name, cmd, logPath)
	if err != nil {
		t.Fatalf("testenv: start %s: %v", name, err)
	}
	t.Cleanup(func() {
		p.stop(syscall.SIGTERM, 5*time.Second)
		if t.Failed() {
			t.Logf("testenv: last output of %s (%s):\n%s", name, p.LogPath, tail(p.Logs(), 4096))
		}
	})
	return p
}

// startProcess is StartProcess without a test, for shared servers.
func startProcess(name string, cmd *exec.Cmd, logPath string) (*Process, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child holds its own copy
	cmd.Stdout = teeTo(cmd.Stdout, f)
	cmd.Stderr = teeTo(cmd.Stderr, f)
	if cmd.WaitDelay == 0 {
		cmd.WaitDelay = time.Second // in case a grandchild keeps a caller's pipe open
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	// If the test binary dies (panic, -timeout), take the child with it.
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Process{Cmd: cmd, Name: name, LogPath: logPath, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func teeTo(w io.Writer, f *os.File) io.Writer {
	if w == nil {
		return f
	}
	return io.MultiWriter(w, f)
}

// Pid returns the process id, which is also its process group id.
func (p *Process) Pid() int { return p.Cmd.Process.Pid }

// Done is closed once the process has exited and been waited for.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err returns the result of waiting for the process (nil for exit status 0);
// it blocks until the process has exited.
func (p *Process) Err() error {
	<-p.done
	return p.waitErr
}

// Kill9 sends SIGKILL to the process group now and waits for the process,
// as a crash would.
func (p *Process) Kill9() {
	p.signal(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM to the process group, waits up to 10 s for it to exit,
// then sends SIGKILL and waits.
func (p *Process) Stop() { p.stop(syscall.SIGTERM, 10*time.Second) }

func (p *Process) stop(sig syscall.Signal, grace time.Duration) {
	if p.Exited() {
		return
	}
	p.signal(sig)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.signal(syscall.SIGKILL)
		<-p.done
	}
}

// signal signals the whole process group unless the leader is already gone
// (its group id could then belong to someone else).
func (p *Process) signal(sig syscall.Signal) {
	if p.Exited() {
		return
	}
	_ = syscall.Kill(-p.Pid(), sig)
}

// Logs returns everything the process wrote to stdout and stderr so far.
func (p *Process) Logs() string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", p.LogPath, err)
	}
	return string(b)
}

// WaitHTTP waits until url answers 200, like the function WaitHTTP, but
// fails at once, with the process output, when the process exits first.
func (p *Process) WaitHTTP(t testing.TB, url string, timeout time.Duration) {
	t.Helper()
	if err := pollHTTP(url, timeout, p.done); err != nil {
		t.Fatalf("testenv: %s: %v\n%s output:\n%s", p.Name, err, p.Name, tail(p.Logs(), 4096))
	}
}

// WaitHTTP waits until a GET of url answers 200 and fails the test, naming
// the URL, when that has not happened within timeout.
func WaitHTTP(t testing.TB, url string, timeout time.Duration) {
	t.Helper()
	if err := pollHTTP(url, timeout, nil); err != nil {
		t.Fatalf("testenv: %v", err)
	}
}

// errExited reports that the process died while we waited for it.
var errExited = errors.New("process exited")

// pollHTTP GETs url every 50 ms until it answers 200, exited is closed, or
// timeout passes.
func pollHTTP(url string, timeout time.Duration, exited <-chan struct{}) error {
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(timeout)
	last := "no answer yet"
	for {
		resp, err := client.Get(url)
		if err == nil {
			io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-exited:
			return fmt.Errorf("waiting for %s: %w (last: %s)", url, errExited, last)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not 200 after %v (last: %s)", url, timeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startServer starts a server with try (which picks its ports, starts it
// with StartProcess and returns the URL that answers 200 when ready) and
// waits for it. When the server exits because another process took one of
// its ports in the meantime, it tries again with fresh ports.
func startServer(t testing.TB, name string, timeout time.Duration, try func() (*Process, string)) *Process {
	t.Helper()
	const attempts = 3
	for i := 1; ; i++ {
		p, url := try()
		err := pollHTTP(url, timeout, p.done)
		if err == nil {
			return p
		}
		p.Stop()
		logs := p.Logs()
		if errors.Is(err, errExited) && strings.Contains(logs, "address already in use") && i < attempts {
			t.Logf("testenv: %s lost a port race, retrying with new ports", name)
			continue
		}
		t.Fatalf("testenv: %s did not get ready: %v\n%s output:\n%s", name, err, name, tail(logs, 4096))
	}
}

// tail returns the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// sanitize turns s into something usable in file and database names.
func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}
