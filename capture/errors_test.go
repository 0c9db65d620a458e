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

	"github.com/autocapture/autocapture/storage"
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
		want Reason
	}{
		{"down server (real dial)", dialErr, ReasonUnreachable},
		{"artifact store: access denied", fmt.Errorf("store runs/r/x: s3 bucket b at e: put: %w", storage.ErrS3AccessDenied), ReasonBadConfig},
		{"artifact store: no bucket", fmt.Errorf("put: %w", storage.ErrS3NoBucket), ReasonBadConfig},
		{"artifact store: unreachable", fmt.Errorf("put: %w", storage.ErrS3Unreachable), ReasonUnreachable},
		{"down server (real GET)", getErr, ReasonUnreachable},
		{"no route to host", opErr(syscall.EHOSTUNREACH), ReasonUnreachable},
		{"network unreachable", opErr(syscall.ENETUNREACH), ReasonUnreachable},
		{"host down", opErr(syscall.EHOSTDOWN), ReasonUnreachable},
		{"NXDOMAIN", &net.DNSError{Err: "no such host", Name: "vllm-0.test", IsNotFound: true}, ReasonUnreachable},
		{"wrapped DNS failure", fmt.Errorf("scrape: %w", &net.DNSError{Err: "server misbehaving", Name: "x.test"}), ReasonUnreachable},
		{"connection reset", opErr(syscall.ECONNRESET), ReasonUnavailable},
		{"503", HTTPStatusError("GET /metrics", 503, ""), ReasonUnavailable},
		{"allow-list refusal", Errorf(ReasonRefused, "target 10.0.0.1:80: not on the allow-list"), ReasonRefused},
		{"deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), ReasonTimeout},
		{"plain", errors.New("boom"), ReasonInternal},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Classify(c.err); got != c.want {
				t.Fatalf("Classify(%v) = %q, want %q", c.err, got, c.want)
			}
		})
	}
}

// TestRetryableByReason: a policy refusal will refuse again, so it is not
// retried; a network failure may heal.
func TestRetryableByReason(t *testing.T) {
	want := map[Reason]bool{ReasonRefused: false, ReasonUnreachable: true, ReasonUnavailable: true,
		ReasonTimeout: true, ReasonUpstream5xx: true, ReasonBadConfig: false, ReasonUpstream4xx: false,
		ReasonCancelled: false, ReasonTooLarge: false, ReasonInternal: false}
	for _, r := range Reasons {
		w, ok := want[r]
		if !ok {
			t.Errorf("reason %q has no expectation here", r)
			continue
		}
		if r.Retryable() != w {
			t.Errorf("%s.Retryable() = %v, want %v", r, r.Retryable(), w)
		}
		delete(want, r)
	}
	for r := range want {
		t.Errorf("reason %q missing from capture.Reasons (validation and the schema read that list)", r)
	}
}
