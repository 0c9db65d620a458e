package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/autocapture/autocapture/capture"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/storage"
)

// runEnv is the Env one attempt of a run executes with: the daemon's, its
// store wrapped in the run's byte cap (runs.max_artifact_bytes) when there is
// one. recorded holds the run's steps recorded so far (doneSteps): their
// artifacts count against the cap, so it spans every attempt.
func (s *Service) runEnv(runID string, recorded map[string]map[string]executor.StepRecord) *capture.Env {
	env := s.o.Env
	if env == nil || env.Store == nil || s.cfg.MaxArtifactBytes <= 0 {
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
	e.Store = &cappedStore{Store: env.Store, runID: runID, limit: s.cfg.MaxArtifactBytes, used: used, start: used}
	return &e
}

// cappedStore is a store that lets one run's attempt put at most limit bytes
// in all, counting what the run had recorded before (start). Parallel steps
// share it: each Put reserves the bytes it reads as it reads them, so the
// Put that would pass the cap is the one cut off, whichever step it is.
//
// While streaming, bytes are counted as handed to the store (before any
// compression); once stored, a Put is settled at the stored size, which is
// what the run's records sum up on the next attempt.
//
// A cut-off Put is removed: the store's Put fails on the reader's error (an
// S3 multipart upload is aborted, Local drops its temporary file), and the
// key is deleted besides if a backend kept anything under it. A kill -9 between
// the failed Put and that Delete leaves at most an orphaned object no step
// recorded: the next attempt puts under attempt-<n>/ keys, the cap counts
// recorded artifacts only, and retention removes the orphan with its run.
type cappedStore struct {
	storage.Store
	runID string
	limit int64

	mu    sync.Mutex
	used  int64 // start + settled puts + bytes in flight
	start int64 // recorded before this attempt
}

// errCapped is what the cut-off reader returns to the store's Put.
var errCapped = errors.New("run artifact byte cap reached")

func (c *cappedStore) Put(ctx context.Context, key string, r io.Reader, meta storage.Meta) (storage.Object, error) {
	cr := &capReader{r: r, c: c}
	obj, err := c.Store.Put(ctx, key, cr, meta)
	if cr.over || errors.Is(err, errCapped) {
		c.add(-cr.n)
		derr := c.removePartial(context.WithoutCancel(ctx), key)
		c.mu.Lock()
		total := c.used
		c.mu.Unlock()
		msg := fmt.Sprintf("cut off after %s: it would pass runs.max_artifact_bytes (%s) for run %s, which has stored %s (%s before this attempt)",
			fmtBytes(cr.n), fmtBytes(c.limit), c.runID, fmtBytes(total), fmtBytes(c.start))
		if derr != nil {
			msg += "; removing the partial object failed: " + derr.Error()
		}
		return storage.Object{}, capture.Errorf(capture.ReasonTooLarge, "%s", msg)
	}
	if err != nil {
		c.add(-cr.n)
		return obj, err
	}
	c.add(obj.Size - cr.n)
	return obj, nil
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

func (c *cappedStore) add(n int64) {
	c.mu.Lock()
	c.used += n
	c.mu.Unlock()
}

// reserve counts n more bytes in flight; false when they pass the cap (then
// nothing is counted).
func (c *cappedStore) reserve(n int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.used+n > c.limit {
		return false
	}
	c.used += n
	return true
}

// capReader counts what one Put reads against the run's cap.
type capReader struct {
	r    io.Reader
	c    *cappedStore
	n    int64 // reserved by this Put
	over bool
}

func (r *capReader) Read(p []byte) (int, error) {
	if r.over {
		return 0, errCapped
	}
	n, err := r.r.Read(p)
	if n > 0 && !r.c.reserve(int64(n)) {
		r.over = true
		return 0, errCapped
	}
	r.n += int64(n)
	return n, err
}

// fmtBytes is a byte count for people: 2.0 GiB, 512 B.
func fmtBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB (%d bytes)", float64(n)/float64(div), "KMGTP"[exp], n)
}
