package storage

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/autocapture/autocapture/vocab"
)

// TestLocalPutWhileDeletePrunes: Delete removes the folders it leaves empty
// (up to the root); a Put into those folders at that moment must still
// succeed. The spool lives on this: an upload deletes its spooled file while
// another step spools into the same run's folders because the bucket is
// still down. (Found by TestServeChaos: a put failed "sidecar: mkdir …: no
// such file or directory" when a prune removed a parent MkdirAll had just
// made, or the folder before the temporary file was created in it.)
func TestLocalPutWhileDeletePrunes(t *testing.T) {
	s, err := NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const rounds, writers = 100, 4
	var wg sync.WaitGroup
	errs := make(chan error, rounds*writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				// Every writer shares the run folder a/b/<round>; each put
				// is deleted at once, emptying (and pruning) it again.
				key := fmt.Sprintf("a/b/%d/step%d/w%d.json", i%3, i%2, w)
				if _, err := s.Put(ctx, key, strings.NewReader(`{"x":1}`), vocab.ObjectMeta{ContentType: "application/json"}); err != nil {
					errs <- fmt.Errorf("put %s: %w", key, err)
					continue
				}
				if err := s.Delete(ctx, key); err != nil {
					errs <- fmt.Errorf("delete %s: %w", key, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		if n < 5 {
			t.Error(err)
		}
		n++
	}
	if n > 0 {
		t.Fatalf("%d of %d puts and deletes failed", n, 2*rounds*writers)
	}
}

// TestLocalPutUnderAnObjectFails: createTemp retries "file exists" (a folder
// made by one Put and pruned by a Delete between MkdirAll's Mkdir and Lstat),
// so an object standing where a folder must be has to fail still: at once,
// as "not a directory" naming it, and leave that object as it was.
func TestLocalPutUnderAnObjectFails(t *testing.T) {
	s, err := NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Put(ctx, "a/b", strings.NewReader("x"), vocab.ObjectMeta{ContentType: "text/plain"}); err != nil {
		t.Fatal(err)
	}
	_, err = s.Put(ctx, "a/b/c.json", strings.NewReader(`{}`), vocab.ObjectMeta{ContentType: "application/json"})
	if err == nil {
		t.Fatal("put a/b/c.json under the object a/b succeeded")
	}
	// The key contains "a/b" too: the folder path is what names the obstacle.
	if !errors.Is(err, syscall.ENOTDIR) || !strings.Contains(err.Error(), filepath.Join(s.Root(), "a", "b")+":") {
		t.Errorf("error is not \"not a directory\" naming the object in the way: %v", err)
	}
	obj, err := s.Stat(ctx, "a/b")
	if err != nil || obj.OriginalSize != 1 {
		t.Fatalf("a/b after the failed put: %+v, %v", obj, err)
	}
}
