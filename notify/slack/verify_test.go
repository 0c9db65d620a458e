package slack

import (
	"strconv"
	"testing"
	"time"
)

// TestSlackReplaySetStaysBounded: past its bound the set forgets what could
// no longer be replayed first, and never grows beyond it.
func TestSlackReplaySetStaysBounded(t *testing.T) {
	now := clickNow
	v := newVerifier(signingSecret, func() time.Time { return now })
	for i := range maxSeenSignatures + 10 {
		if !v.remember("sig"+strconv.Itoa(i), now.Add(time.Duration(i)*time.Millisecond), now) {
			t.Fatalf("signature %d refused", i)
		}
	}
	if len(v.seen) != maxSeenSignatures {
		t.Fatalf("%d signatures kept, want %d", len(v.seen), maxSeenSignatures)
	}
	if v.remember("sig"+strconv.Itoa(maxSeenSignatures+5), now.Add(time.Hour), now) {
		t.Error("a recent signature was forgotten before older ones")
	}
}
