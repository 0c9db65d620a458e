package capture

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/autocapture/autocapture/capture/internal/stepkit"
	"github.com/autocapture/autocapture/vocab"
)

// TestClassifySeparatesPolicyFromNetwork: `refused` is only ever a policy
// decision (the allow-list said no); a server that is down, a missing route
// and a name that does not resolve are `unreachable`. Before, a down server
// was `refused`, the word the allow-list uses.
func TestClassifySeparatesPolicyFromNetwork(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	_, dialErr := (&net.Dialer{Timeout: 2 * time.Second}).Dial("tcp", dead)
	if dialErr == nil {
		t.Fatalf("dial %s succeeded: nothing should listen there", dead)
	}
	_, getErr := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + dead + "/metrics")
	opErr := func(errno syscall.Errno) error {
		return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", errno)}
	}
	cases := []struct {
		name string
		err  error
		want vocab.Reason
	}{
		{"down server (real dial)", dialErr, vocab.ReasonUnreachable},
		{"artifact store: access denied", fmt.Errorf("store runs/r/x: s3 bucket b at e: put: %w", vocab.ErrStoreAccessDenied), vocab.ReasonBadConfig},
		{"artifact store: no bucket", fmt.Errorf("put: %w", vocab.ErrStoreNoBucket), vocab.ReasonBadConfig},
		{"artifact store: unreachable", fmt.Errorf("put: %w", vocab.ErrStoreUnreachable), vocab.ReasonUnreachable},
		{"down server (real GET)", getErr, vocab.ReasonUnreachable},
		{"no route to host", opErr(syscall.EHOSTUNREACH), vocab.ReasonUnreachable},
		{"network unreachable", opErr(syscall.ENETUNREACH), vocab.ReasonUnreachable},
		{"host down", opErr(syscall.EHOSTDOWN), vocab.ReasonUnreachable},
		{"NXDOMAIN", &net.DNSError{Err: "no such host", Name: "vllm-0.test", IsNotFound: true}, vocab.ReasonUnreachable},
		{"wrapped DNS failure", fmt.Errorf("scrape: %w", &net.DNSError{Err: "server misbehaving", Name: "x.test"}), vocab.ReasonUnreachable},
		{"connection reset", opErr(syscall.ECONNRESET), vocab.ReasonUnavailable},
		{"503", stepkit.HTTPStatusError("GET /metrics", 503, ""), vocab.ReasonUnavailable},
		{"allow-list refusal", vocab.Errorf(vocab.ReasonRefused, "target 10.0.0.1:80: not on the allow-list"), vocab.ReasonRefused},
		{"deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), vocab.ReasonTimeout},
		{"plain", errors.New("boom"), vocab.ReasonInternal},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := vocab.Classify(c.err); got != c.want {
				t.Fatalf("Classify(%v) = %q, want %q", c.err, got, c.want)
			}
		})
	}
}
