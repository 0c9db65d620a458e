package artifacts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"

	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vocab"
)

// TestCappedStoreCountsEarlierAttemptsAndParallelPuts: what the run recorded
// before counts, and parallel puts never store more than the cap in all.
func TestCappedStoreCountsEarlierAttemptsAndParallelPuts(t *testing.T) {
	ctx := context.Background()
	store := newLocalStore(t)
	earlier := map[string]map[string]executor.StepRecord{"pb": {"old": {Artifacts: []vocab.Artifact{{Size: 9_500}}}}}
	env := RunEnv(&vocab.Env{Store: store}, "run-x", 10_000, earlier)
	if _, err := env.Store.Put(ctx, "k/over.bin", bytes.NewReader(make([]byte, 600)), vocab.ObjectMeta{}); vocab.Classify(err) != vocab.ReasonTooLarge {
		t.Fatalf("600 bytes over 9,500 recorded under 10,000: %v", err)
	}
	if _, err := env.Store.Put(ctx, "k/fits.bin", bytes.NewReader(make([]byte, 500)), vocab.ObjectMeta{}); err != nil {
		t.Fatalf("500 bytes that fit: %v", err)
	}
	if _, err := store.Stat(ctx, "k/over.bin"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("the cut-off object is still there: %v", err)
	}

	env = RunEnv(&vocab.Env{Store: store}, "run-y", 10_000, nil)
	var wg sync.WaitGroup
	var mu sync.Mutex
	stored, refused := int64(0), 0
	for i := range 16 {
		wg.Go(func() {
			key := fmt.Sprintf("p/%02d.bin", i)
			obj, err := env.Store.Put(ctx, key, bytes.NewReader(bytes.Repeat([]byte{byte(i)}, 1_500)), vocab.ObjectMeta{})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if vocab.Classify(err) != vocab.ReasonTooLarge {
					t.Errorf("%s: %v", key, err)
				}
				if _, serr := store.Stat(ctx, key); !errors.Is(serr, storage.ErrNotFound) {
					t.Errorf("%s refused but stored: %v", key, serr)
				}
				refused++
				return
			}
			stored += obj.Size
		})
	}
	wg.Wait()
	if stored > 10_000 || stored < 1_500 || refused == 0 {
		t.Fatalf("stored %d bytes in all (cap 10,000), %d refused", stored, refused)
	}
}

// stallingReader hands out head, then blocks until release is closed, then
// hands out tail.
type stallingReader struct {
	head, tail []byte
	stalled    chan struct{}
	release    chan struct{}
	once       sync.Once
}

func (r *stallingReader) Read(p []byte) (int, error) {
	if len(r.head) > 0 {
		n := copy(p, r.head)
		r.head = r.head[n:]
		return n, nil
	}
	r.once.Do(func() { close(r.stalled) })
	<-r.release
	if len(r.tail) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.tail)
	r.tail = r.tail[n:]
	return n, nil
}

// TestCappedStoreDoesNotStarveASmallPut: a big put still streaming (99 KB of
// a 100 KB cap read, more to come) does not make a small parallel put fail;
// the big one, once it passes the cap, does. (Reserving in-flight bytes
// failed the small one as well, depending on timing.)
func TestCappedStoreDoesNotStarveASmallPut(t *testing.T) {
	ctx := context.Background()
	store := newLocalStore(t)
	env := RunEnv(&vocab.Env{Store: store}, "run-z", 100_000, nil)
	big := &stallingReader{head: make([]byte, 99_000), tail: make([]byte, 20_000),
		stalled: make(chan struct{}), release: make(chan struct{})}
	bigErr := make(chan error, 1)
	go func() {
		_, err := env.Store.Put(ctx, "z/big.bin", big, vocab.ObjectMeta{ContentType: "application/octet-stream"})
		bigErr <- err
	}()
	<-big.stalled
	if _, err := env.Store.Put(ctx, "z/small.bin", bytes.NewReader(make([]byte, 3_000)), vocab.ObjectMeta{ContentType: "application/octet-stream"}); err != nil {
		t.Fatalf("a small put beside a big one in flight: %v", err)
	}
	close(big.release)
	if err := <-bigErr; vocab.Classify(err) != vocab.ReasonTooLarge {
		t.Fatalf("the big put passing the cap: %v, want too-large", err)
	}
	if _, err := store.Stat(ctx, "z/big.bin"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("the cut-off big object is still there: %v", err)
	}
}
