package outbox

import (
	"testing"
	"time"
)

// TestRetryBackoff: a failing operation is retried after 1, 2, 4 s, then
// every 5 s (River's scheduler interval: a longer snooze waits for the
// leader's scheduler) for about half a minute, then ever more rarely, at
// most every 5 minutes.
func TestRetryBackoff(t *testing.T) {
	want := []time.Duration{1, 2, 4, 5, 5, 5, 5, 5, 10, 20, 40, 80, 160, 300, 300, 300}
	var total time.Duration
	for i, w := range want {
		got := retryBackoff(i + 1)
		if got != w*time.Second {
			t.Errorf("retryBackoff(%d) = %v, want %v", i+1, got, w*time.Second)
		}
		if i < 8 {
			total += got
		}
	}
	if retryBackoff(0) != time.Second || retryBackoff(1000) != 5*time.Minute {
		t.Errorf("retryBackoff(0) = %v, retryBackoff(1000) = %v; want 1s and 5m", retryBackoff(0), retryBackoff(1000))
	}
	if total != 32*time.Second {
		t.Errorf("the first 8 retries wait %v in all, want 32s", total)
	}
}
