package storage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
)

// Local stores artifacts as files below a root folder.
type Local struct {
	root string
}

var _ Store = (*Local)(nil)

// NewLocal returns a store rooted at dir, creating it.
func NewLocal(dir string) (*Local, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}
	if err := os.MkdirAll(abs, 0o750); err != nil {
		return nil, fmt.Errorf("storage: create %s: %w", abs, err)
	}
	return &Local{root: abs}, nil
}

// Root is the folder artifacts live in.
func (l *Local) Root() string { return l.root }

func (l *Local) path(key string) (string, error) {
	if err := ValidKey(key); err != nil {
		return "", err
	}
	return filepath.Join(l.root, filepath.FromSlash(key)), nil
}

// Put streams r to a temporary file beside the target and renames it into place, so
// a reader never sees half an object and a crash leaves no partial file under key.
func (l *Local) Put(ctx context.Context, key string, r io.Reader, _ Meta) (Object, error) {
	p, err := l.path(key)
	if err != nil {
		return Object{}, err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		return Object{}, fmt.Errorf("storage: put %s: %w", key, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".put-*")
	if err != nil {
		return Object{}, fmt.Errorf("storage: put %s: %w", key, err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), ctxReader{ctx, r})
	if err == nil {
		// The run row that will point at this object is committed durably; the
		// object must be on disk before that, not just in the page cache.
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Object{}, fmt.Errorf("storage: put %s: %w", key, err)
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return Object{}, fmt.Errorf("storage: put %s: %w", key, err)
	}
	if err := syncDir(filepath.Dir(p)); err != nil {
		return Object{}, fmt.Errorf("storage: put %s: %w", key, err)
	}
	return Object{Key: key, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// Link returns the object's file:// URL.
func (l *Local) Link(_ context.Context, key string) (string, error) {
	p, err := l.path(key)
	if err != nil {
		return "", err
	}
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(p)}).String(), nil
}

// Open reads an object back.
func (l *Local) Open(_ context.Context, key string) (io.ReadCloser, error) {
	p, err := l.path(key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	return f, err
}

// ctxReader stops a copy when its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
