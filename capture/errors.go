package capture

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
)

// Reason classifies why a step failed, so the runner's retrier and the thread can
// say it in one word.
type Reason string

// The reasons a step can fail for.
const (
	ReasonTimeout     Reason = "timeout"
	ReasonRefused     Reason = "refused"     // connection refused, or the allow-list said no
	ReasonUnavailable Reason = "unavailable" // DNS, reset, 503, no route
	ReasonBadConfig   Reason = "bad-config"  // the playbook or daemon config is wrong
	ReasonUpstream4xx Reason = "upstream-4xx"
	ReasonUpstream5xx Reason = "upstream-5xx"
	ReasonCancelled   Reason = "cancelled"
	ReasonInternal    Reason = "internal"
)

// Reasons lists every reason: the one list that validation and schemas use.
var Reasons = []Reason{ReasonTimeout, ReasonRefused, ReasonUnavailable, ReasonBadConfig,
	ReasonUpstream4xx, ReasonUpstream5xx, ReasonCancelled, ReasonInternal}

// Retryable says whether a retry may help.
func (r Reason) Retryable() bool {
	switch r {
	case ReasonTimeout, ReasonUnavailable, ReasonUpstream5xx, ReasonRefused:
		return true
	}
	return false
}

// Error is a step failure with its reason.
type Error struct {
	Reason Reason
	Err    error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Errorf makes a classified error: capture.Errorf(capture.ReasonBadConfig, "query %q: %w", q, err).
func Errorf(r Reason, format string, args ...any) error {
	return &Error{Reason: r, Err: fmt.Errorf(format, args...)}
}

// HTTPStatusError classifies a non-2xx answer from an upstream.
func HTTPStatusError(what string, status int, body string) error {
	r := ReasonUpstream5xx
	if status < 500 {
		r = ReasonUpstream4xx
	}
	if status == 503 || status == 502 || status == 504 {
		r = ReasonUnavailable
	}
	if len(body) > 200 {
		body = body[:200] + "…"
	}
	return Errorf(r, "%s: HTTP %d: %s", what, status, body)
}

// Classify finds the reason of any error: a classified one keeps its own; context
// deadlines, refused connections and DNS failures are recognised.
func Classify(err error) Reason {
	if err == nil {
		return ""
	}
	var ce *Error
	if errors.As(err, &ce) {
		return ce.Reason
	}
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return ReasonTimeout
	case errors.Is(err, context.Canceled):
		return ReasonCancelled
	case errors.Is(err, syscall.ECONNREFUSED):
		return ReasonRefused
	case errors.As(err, &ne) && ne.Timeout():
		return ReasonTimeout
	}
	var dnsErr *net.DNSError
	var opErr *net.OpError
	if errors.As(err, &dnsErr) || errors.As(err, &opErr) {
		return ReasonUnavailable
	}
	return ReasonInternal
}

// SkipError says a step has nothing to do here, for a reason that is no failure:
// an optional backend is not configured (tier 2 with no traces.url). The runner
// records the step as skipped with Why, and the run is not made partial by it.
type SkipError struct {
	Why string
}

func (e *SkipError) Error() string { return e.Why }

// Skipf makes a SkipError.
func Skipf(format string, args ...any) error {
	return &SkipError{Why: fmt.Sprintf(format, args...)}
}

// IsSkip returns the reason when err says the step had nothing to do.
func IsSkip(err error) (string, bool) {
	var se *SkipError
	if errors.As(err, &se) {
		return se.Why, true
	}
	return "", false
}
