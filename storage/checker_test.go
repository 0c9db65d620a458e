package storage

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestCheckerReportsFirstResultAndChanges: a store down, down, up, up, down
// is reported three times (down at first, up, down again), and Run returns
// once its context ends.
func TestCheckerReportsFirstResultAndChanges(t *testing.T) {
	down := errors.New("s3 bucket b at http://x: endpoint unreachable")
	results := []error{down, down, nil, nil, down, down}
	var mu sync.Mutex
	var calls int
	var changes []error
	ctx, cancel := context.WithCancel(context.Background())
	c := &Checker{
		Interval: time.Millisecond,
		Check: func(ctx context.Context) error {
			if _, ok := ctx.Deadline(); !ok {
				t.Error("a check without a deadline")
			}
			mu.Lock()
			defer mu.Unlock()
			i := calls
			calls++
			if i >= len(results)-1 {
				cancel()
				return results[len(results)-1]
			}
			return results[i]
		},
		Changed: func(err error) {
			mu.Lock()
			defer mu.Unlock()
			changes = append(changes, err)
		},
	}
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	mu.Lock()
	defer mu.Unlock()
	want := []error{down, nil, down}
	if len(changes) != len(want) {
		t.Fatalf("changes = %v, want %v", changes, want)
	}
	for i := range want {
		if changes[i] != want[i] {
			t.Fatalf("changes = %v, want %v", changes, want)
		}
	}
}

// TestCheckerReportsAnUpStoreOnce: the first result is reported even when it
// is good (a gauge must get its first value), and not again while it stays.
func TestCheckerReportsAnUpStoreOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	calls, changes := 0, 0
	c := &Checker{Interval: time.Millisecond,
		Check: func(context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			if calls++; calls == 20 {
				cancel()
			}
			return nil
		},
		Changed: func(err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("Changed(%v) for an up store", err)
			}
			changes++
		}}
	c.Run(ctx)
	if changes != 1 {
		t.Fatalf("Changed called %d times over %d checks of an up store, want 1", changes, calls)
	}
}
