package daemon

import (
	"bytes"
	"errors"
	"os/exec"
	"testing"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
)

// healthcheck runs the built binary's healthcheck with args and returns its
// exit code and output.
func healthcheck(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runBinary(t, append([]string{"healthcheck"}, args...)...)
}

// runBinary runs the built autocapture binary with args to its exit.
func runBinary(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	cmd := exec.Command(testenv.BuildBinary(t, "./cmd/autocapture"), args...)
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("autocapture %v: %v", args, err)
	}
	return code, o.String(), e.String()
}

// TestHealthcheckOnTheRealDaemon: the built binary's healthcheck passes
// against a running `serve` and fails once it has stopped.
func TestHealthcheckOnTheRealDaemon(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, &daemonOpts{Token: "tok"})
	bin := testenv.BuildBinary(t, "./cmd/autocapture")
	probe := func() (string, error) {
		out, err := exec.Command(bin, "healthcheck", "--url", d.URL+"/-/healthy").CombinedOutput()
		return string(out), err
	}
	if out, err := probe(); err != nil {
		t.Fatalf("healthcheck on a live daemon: %v\n%s", err, out)
	}
	d.Proc.Stop()
	out, err := probe()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("healthcheck on a stopped daemon: %v\n%s", err, out)
	}
}
