package silences

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
)

const amConfig = "route:\n  receiver: none\nreceivers:\n  - name: none\n"

// Against a real HA pair: a silence made through the first member is seen
// by the second, Ensure again finds it rather than making another, and
// Expire through the second member ends it for both.
func TestEnsureFindsAndExpireEndsAcrossThePair(t *testing.T) {
	pair := testenv.StartAlertmanagerPair(t, amConfig)
	c, err := New(config.Alertmanager{URLs: []string{pair[0].URL, pair[1].URL}})
	if err != nil {
		t.Fatal(err)
	}
	second, _ := New(config.Alertmanager{URLs: []string{pair[1].URL}})
	ctx := context.Background()
	s := Silence{Matchers: []Matcher{{"alertname", "VLLMKVCacheHigh"}, {"instance", "gpu-1:8000"}},
		EndsAt: time.Now().Add(time.Hour), CreatedBy: "alice (U0ALICE)", Comment: "autocapture run r1: http://x/runs/r1"}
	id, created, err := c.Ensure(ctx, s)
	if err != nil || !created || id == "" {
		t.Fatalf("Ensure = %q %v %v, want a new silence", id, created, err)
	}
	var f Found
	deadline := time.Now().Add(20 * time.Second)
	for {
		if f, err = second.Get(ctx, id); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil || f.State != "active" || f.CreatedBy != s.CreatedBy || !sameMatchers(f.Matchers, s.Matchers) {
		t.Fatalf("the second member holds %+v (%v), want the active silence by alice", f, err)
	}
	again, created, err := second.Ensure(ctx, s)
	if err != nil || created || again != id {
		t.Fatalf("Ensure again = %q created=%v %v, want the existing %q", again, created, err, id)
	}
	other := s
	other.Comment = "another run"
	if oid, created, _ := c.Ensure(ctx, other); !created || oid == id {
		t.Fatalf("a different comment found %q, want a new silence", oid)
	}
	if err := second.Expire(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := c.Expire(ctx, id); err != nil {
		t.Fatalf("expiring twice: %v", err)
	}
	if f, err = c.Get(ctx, id); err != nil || f.State != "expired" {
		t.Fatalf("after Expire: %+v %v, want expired", f, err)
	}
}

// Down, and the second member up: the call goes to the second. Both down:
// ErrUnavailable, saying which URL.
func TestEnsureFallsOverAndSaysUnavailable(t *testing.T) {
	am := testenv.StartAlertmanager(t, amConfig)
	dead := "http://127.0.0.1:" + itoa(testenv.FreePort(t))
	c, _ := New(config.Alertmanager{URLs: []string{dead, am.URL}, Timeout: 2 * time.Second})
	s := Silence{Matchers: []Matcher{{"alertname", "A"}}, EndsAt: time.Now().Add(time.Hour), CreatedBy: "bob", Comment: "c"}
	if _, _, err := c.Ensure(context.Background(), s); err != nil {
		t.Fatalf("with one member up: %v", err)
	}
	down, _ := New(config.Alertmanager{URLs: []string{dead}, Timeout: 2 * time.Second})
	_, _, err := down.Ensure(context.Background(), s)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), dead) {
		t.Fatalf("all down: %v, want ErrUnavailable naming %s", err, dead)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
