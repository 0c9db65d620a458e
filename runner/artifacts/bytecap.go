package artifacts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/autocapture/autocapture/internal/bytesize"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vocab"
)

// RunEnv is the Env one attempt of run runID executes with: env, its store
// wrapped in the run's byte cap (limit, runs.max_artifact_bytes) when there is
// one. recorded holds the run's steps recorded so far (runner/lifecycle's
// doneSteps): their artifacts count against the cap, so it spans every
// attempt.
func RunEnv(env *vocab.Env, runID string, limit int64, recorded map[string]map[string]executor.StepRecord) *vocab.Env {
	if env == nil || env.Store == nil || limit <= 0 {
		return env
	}
	var used int64
	for _, steps := range recorded {
		for _, st := range steps {
			for _, a := range st.Artifacts {
				used += a.Size
			}
		}
	}
	e := *env
	e.Store = &cappedStore{Store: env.Store, runID: runID, limit: limit, settled: used, start: used}
	return &e
}

// cappedStore is a store that lets one run's attempt put at most limit bytes
// in all, counting what the run had recorded before (start). Parallel steps
// share it. A Put is cut off while it streams as soon as its own bytes would
// pass what is left (limit minus the puts already settled), and checked again
// when it is stored: if puts that settled meanwhile leave no room for it, it
// is removed and fails. So what a run keeps never passes the cap, and the put
// that fails is one that does not fit — never a small one starved by a big
// one still streaming (a reservation of in-flight bytes did that: the big
// put failed anyway, and took the small one with it). Bytes in flight may
// pass the cap for a moment, each put bounded by it.
//
// While streaming, bytes are counted as handed to the store (before any
// compression); a stored Put settles at its stored size, which is what the
// run's records sum up on the next attempt.
//
// A cut-off Put is removed: the store's Put fails on the reader's error (an
// S3 multipart upload is aborted, Local drops its temporary file), and the
// key is deleted besides if a backend kept anything under it. A kill -9 between
// the failed Put and that Delete leaves at most an orphaned object no step
// recorded: the next attempt puts under attempt-<n>/ keys, the cap counts
// recorded artifacts only, and retention removes the orphan with its run.
type cappedStore struct {
	vocab.Store
	runID string
	limit int64

	mu      sync.Mutex
	settled int64 // start + settled puts
	start   int64 // recorded before this attempt
}

// errCapped is what the cut-off reader returns to the store's Put.
var errCapped = errors.New("run artifact byte cap reached")

func (c *cappedStore) Put(ctx context.Context, key string, r io.Reader, meta vocab.ObjectMeta) (vocab.Object, error) {
	cr := &capReader{r: r, c: c}
	obj, err := c.Store.Put(ctx, key, cr, meta)
	if err == nil && !cr.over && c.settle(obj.Size) {
		return obj, nil
	}
	if err != nil && !cr.over && !errors.Is(err, errCapped) {
		return obj, err
	}
	n := cr.n
	if err == nil {
		n = obj.Size // stored whole, but puts that settled meanwhile left no room
	}
	derr := c.removePartial(context.WithoutCancel(ctx), key)
	c.mu.Lock()
	total := c.settled
	c.mu.Unlock()
	msg := fmt.Sprintf("cut off after %s: it would pass runs.max_artifact_bytes (%s) for run %s, which has stored %s (%s before this attempt)",
		fmtBytes(n), fmtBytes(c.limit), c.runID, fmtBytes(total), fmtBytes(c.start))
	if derr != nil {
		msg += "; removing the partial object failed: " + derr.Error()
	}
	return vocab.Object{}, vocab.Errorf(vocab.ReasonTooLarge, "%s", msg)
}

// settle counts a stored put of size bytes; false when it no longer fits.
func (c *cappedStore) settle(size int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.settled+size > c.limit {
		return false
	}
	c.settled += size
	return true
}

// fits says whether one put of n bytes fits beside the settled ones.
func (c *cappedStore) fits(n int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.settled+n <= c.limit
}

// removePartial deletes what a cut-off Put may have left under key. It asks
// first: a Put that kept nothing (the usual case) needs no Delete, and Local's
// Delete prunes empty folders, which would race with a parallel step creating
// its folder beside this one.
func (c *cappedStore) removePartial(ctx context.Context, key string) error {
	if _, err := c.Store.Stat(ctx, key); errors.Is(err, storage.ErrNotFound) {
		return nil
	}
	return c.Store.Delete(ctx, key)
}

// capReader counts what one Put reads against the run's cap.
type capReader struct {
	r    io.Reader
	c    *cappedStore
	n    int64 // read by this Put
	over bool
}

func (r *capReader) Read(p []byte) (int, error) {
	if r.over {
		return 0, errCapped
	}
	n, err := r.r.Read(p)
	if n > 0 && !r.c.fits(r.n+int64(n)) {
		r.over = true
		return 0, errCapped
	}
	r.n += int64(n)
	return n, err
}

// fmtBytes is a byte count for people with its exact value: 2.0 GiB (2147483648 bytes).
func fmtBytes(n int64) string {
	if n < 1024 {
		return bytesize.Format(n)
	}
	return fmt.Sprintf("%s (%d bytes)", bytesize.Format(n), n)
}
