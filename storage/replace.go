package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/autocapture/autocapture/vocab"
)

// Meta.Replace is the one exception to "a key is written once": an object
// rebuilt on purpose from state kept elsewhere (a run's manifest.json, which
// the runner rewrites when a late upload lands). Everything an artifact's
// recorded SHA256 vouches for keeps the never-overwrite rule; only the
// manifest, which records those hashes rather than being recorded by one,
// is written with Replace.
//
// S3: a plain PUT, without If-None-Match. A new object carries no tags (S3
// tags belong to an object version, and a PUT makes a new one), so a crash
// between the upload and writeTags leaves an untagged object, which Stat
// hashes: never the old object's hashes on the new bytes.
//
// Local: see replace.

// replace writes r over key: the bytes go to a temporary file beside the
// target, then
//
//  1. the sidecar is removed,
//  2. the temporary file is renamed over the key (atomic: a reader sees the
//     old bytes or the new, never a mix),
//  3. the new sidecar is written (itself temp + rename).
//
// A kill -9 after 1 or after 2 leaves bytes without a sidecar, which Stat
// describes by hashing them, as stored: true either way. That is why a
// replaced object is stored uncompressed whatever the store's compression (a
// sidecar-less file is read as stored as is), and why a key written with
// Replace must always be. A stale sidecar is never left beside new bytes.
// Two writers replacing one key at once may leave one's sidecar beside the
// other's bytes; the runner rebuilds the manifest until what it wrote is
// current (see runner/artifacts/manifest.go), so the last write carries the same bytes.
func (l *Local) replace(ctx context.Context, key, p string, r io.Reader, meta vocab.ObjectMeta) (vocab.Object, error) {
	e, err := newEncoding(ctx, key, r, meta, CompressionNone)
	if err != nil {
		return vocab.Object{}, err
	}
	defer e.Close()
	tmp, err := writeTemp(filepath.Dir(p), e.Reader)
	if err != nil {
		return vocab.Object{}, fmt.Errorf("storage: replace %s: %w", key, err)
	}
	defer os.Remove(tmp) // a no-op once renamed
	side := l.sidecar(key)
	if err := os.Remove(side); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return vocab.Object{}, fmt.Errorf("storage: replace %s: sidecar: %w", key, err)
	} else if err == nil {
		if err := syncDir(filepath.Dir(side)); err != nil {
			return vocab.Object{}, fmt.Errorf("storage: replace %s: sidecar: %w", key, err)
		}
	}
	if err := os.Rename(tmp, p); err != nil {
		return vocab.Object{}, fmt.Errorf("storage: replace %s: %w", key, err)
	}
	if err := syncDir(filepath.Dir(p)); err != nil {
		return vocab.Object{}, fmt.Errorf("storage: replace %s: %w", key, err)
	}
	obj := e.Object()
	if err := l.writeSidecar(obj); err != nil {
		return vocab.Object{}, fmt.Errorf("storage: replace %s: sidecar: %w", key, err)
	}
	return obj, nil
}
