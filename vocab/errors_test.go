package vocab

import (
	"testing"
)

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
		t.Errorf("reason %q missing from vocab.Reasons (validation and the schema read that list)", r)
	}
}
