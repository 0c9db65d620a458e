package vocab

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

// The reasons a step can fail for. `refused` is a decision of ours (policy),
// `unreachable` a fact about the network: a new user with no Prometheus running
// sees `unreachable`, never `refused`.
const (
	ReasonTimeout     Reason = "timeout"
	ReasonRefused     Reason = "refused"     // policy: the allow-list, a metadata or our own address said no
	ReasonUnreachable Reason = "unreachable" // network: connection refused (server down), no route, host down, DNS failure
	ReasonUnavailable Reason = "unavailable" // reached, but not answering usefully: reset, 502/503/504
	ReasonBadConfig   Reason = "bad-config"  // the playbook or daemon config is wrong
	ReasonUpstream4xx Reason = "upstream-4xx"
	ReasonUpstream5xx Reason = "upstream-5xx"
	ReasonCancelled   Reason = "cancelled"
	ReasonTooLarge    Reason = "too-large" // an artifact would pass the run's runs.max_artifact_bytes
	ReasonInternal    Reason = "internal"
)

// Reasons lists every reason: the one list that validation and schemas use.
var Reasons = []Reason{ReasonTimeout, ReasonRefused, ReasonUnreachable, ReasonUnavailable, ReasonBadConfig,
	ReasonUpstream4xx, ReasonUpstream5xx, ReasonCancelled, ReasonTooLarge, ReasonInternal}

// Retryable says whether a retry may help: a network failure may heal, a
// policy refusal will refuse again.
func (r Reason) Retryable() bool {
	switch r {
	case ReasonTimeout, ReasonUnreachable, ReasonUnavailable, ReasonUpstream5xx:
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

// Errorf makes a classified error: vocab.Errorf(vocab.ReasonBadConfig, "query %q: %w", q, err).
func Errorf(r Reason, format string, args ...any) error {
	return &Error{Reason: r, Err: fmt.Errorf(format, args...)}
}

// Classify finds the reason of any error: a classified one keeps its own; context
// deadlines, failed connections and DNS failures are recognised. Only a
// classified error is ever `refused` (a policy says so); a connection the
// far side refused is `unreachable`.
func Classify(err error) Reason {
	if err == nil {
		return ""
	}
	var ce *Error
	if errors.As(err, &ce) {
		return ce.Reason
	}
	var ne net.Error
	var dnsErr *net.DNSError
	switch {
	// A deadline or a cancel first: whatever else wraps it (an SDK's
	// url.Error is a net.Error too), the step ran out of time or was stopped.
	case errors.Is(err, context.DeadlineExceeded):
		return ReasonTimeout
	case errors.Is(err, context.Canceled):
		return ReasonCancelled
	// The artifact store said why (storage's S3 errors): keys, bucket,
	// region or credentials are a config problem; a store we cannot reach
	// is the network's.
	case errors.Is(err, ErrStoreAccessDenied), errors.Is(err, ErrStoreNoBucket),
		errors.Is(err, ErrStoreWrongRegion), errors.Is(err, ErrStoreNoCredentials),
		errors.Is(err, ErrStoreBadRequest):
		return ReasonBadConfig
	case errors.Is(err, ErrStoreUnreachable):
		return ReasonUnreachable
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTDOWN):
		return ReasonUnreachable
	case errors.As(err, &dnsErr) && !dnsErr.IsTimeout:
		return ReasonUnreachable
	case errors.As(err, &ne) && ne.Timeout():
		return ReasonTimeout
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) {
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

// NotConfiguredError says a step cannot run because something it needs is
// not configured (no Prometheus, no trace backend, no agent token): neither a
// failure of the step nor of the system it reads. The runner records the
// step as not-configured (grey on every surface, counted for no status of
// the run), with What as its reason: exactly what is missing and the key
// that sets it.
type NotConfiguredError struct {
	What string
}

func (e *NotConfiguredError) Error() string { return "not configured: " + e.What }

// NotConfigured makes a NotConfiguredError: vocab.NotConfigured("no
// Prometheus (set prometheus.url)").
func NotConfigured(format string, args ...any) error {
	return &NotConfiguredError{What: fmt.Sprintf(format, args...)}
}

// IsNotConfigured returns what is missing when err says so.
func IsNotConfigured(err error) (string, bool) {
	var nc *NotConfiguredError
	if errors.As(err, &nc) {
		return nc.What, true
	}
	return "", false
}

// IsSkip returns the reason when err says the step had nothing to do.
func IsSkip(err error) (string, bool) {
	var se *SkipError
	if errors.As(err, &se) {
		return se.Why, true
	}
	return "", false
}
