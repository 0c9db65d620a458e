package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/autocapture/autocapture/vocab"
)

// Local stores artifacts as files below a root folder: the file at the key's
// path holds the stored bytes (gzip or zstd when the store compressed them),
// and a sidecar .meta/<key>.json holds the Object (content type, encoding,
// sizes, hashes). Keys never start with ".meta/" (Put refuses them), and
// List never shows sidecars or temporary files.
//
// One writer per key is assumed (runs are leased); a key is never
// overwritten: see Store.
type Local struct {
	root        string
	compression Compression
}

var _ vocab.Store = (*Local)(nil)

// metaDir is the sidecar tree below the root.
const metaDir = ".meta"

// LocalOption configures a Local store.
type LocalOption func(*Local)

// WithLocalCompression sets how text is compressed on the way in (default
// DefaultCompression).
func WithLocalCompression(c Compression) LocalOption { return func(l *Local) { l.compression = c } }

// NewLocal returns a store rooted at dir, creating it.
func NewLocal(dir string, opts ...LocalOption) (*Local, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}
	if err := os.MkdirAll(abs, 0o750); err != nil {
		return nil, fmt.Errorf("storage: create %s: %w", abs, err)
	}
	l := &Local{root: abs, compression: DefaultCompression}
	for _, o := range opts {
		o(l)
	}
	return l, nil
}

// Root is the folder artifacts live in.
func (l *Local) Root() string { return l.root }

func (l *Local) path(key string) (string, error) {
	if err := ValidKey(key); err != nil {
		return "", err
	}
	if key == metaDir || strings.HasPrefix(key, metaDir+"/") {
		return "", fmt.Errorf("storage: key %q is in the reserved %s/ tree", key, metaDir)
	}
	return filepath.Join(l.root, filepath.FromSlash(key)), nil
}

func (l *Local) sidecar(key string) string {
	return filepath.Join(l.root, metaDir, filepath.FromSlash(key)+".json")
}

// Put streams r (compressed on the way when text) to a temporary file beside
// the target, writes the sidecar, then links the file into place, which
// fails if the key exists: a reader never sees half an object, a crash leaves
// no partial file under key, and an existing key is never replaced.
func (l *Local) Put(ctx context.Context, key string, r io.Reader, meta vocab.ObjectMeta) (vocab.Object, error) {
	p, err := l.path(key)
	if err != nil {
		return vocab.Object{}, err
	}
	if meta.Replace {
		return l.replace(ctx, key, p, r, meta)
	}
	e, err := newEncoding(ctx, key, r, meta, l.compression)
	if err != nil {
		return vocab.Object{}, err
	}
	defer e.Close()
	if _, err := os.Lstat(p); err == nil {
		return l.putExisting(ctx, key, e)
	}
	tmp, err := writeTemp(filepath.Dir(p), e.Reader)
	if err != nil {
		return vocab.Object{}, fmt.Errorf("storage: put %s: %w", key, err)
	}
	defer os.Remove(tmp) // the data stays linked under key
	obj := e.Object()
	if err := l.writeSidecar(obj); err != nil {
		return vocab.Object{}, fmt.Errorf("storage: put %s: sidecar: %w", key, err)
	}
	if err := os.Link(tmp, p); errors.Is(err, fs.ErrExist) {
		return l.compare(ctx, key, obj)
	} else if err != nil {
		return vocab.Object{}, fmt.Errorf("storage: put %s: %w", key, err)
	}
	if err := syncDir(filepath.Dir(p)); err != nil {
		return vocab.Object{}, fmt.Errorf("storage: put %s: %w", key, err)
	}
	return obj, nil
}

// putExisting handles a Put of a key that exists: the new bytes are hashed
// (not stored) and compared with what is stored.
func (l *Local) putExisting(ctx context.Context, key string, e *encoding) (vocab.Object, error) {
	if _, err := io.Copy(io.Discard, e.Reader); err != nil {
		return vocab.Object{}, fmt.Errorf("storage: put %s: %w", key, err)
	}
	return l.compare(ctx, key, e.Object())
}

// compare decides a Put of a key that exists: same content is an idempotent
// success with the stored Object, other content is ErrConflict.
func (l *Local) compare(ctx context.Context, key string, put vocab.Object) (vocab.Object, error) {
	stored, err := l.Stat(ctx, key)
	if err != nil {
		return vocab.Object{}, fmt.Errorf("storage: put %s: key exists: %w", key, err)
	}
	return sameContent(key, stored, put)
}

// sameContent returns stored when put carries the same content, else ErrConflict.
func sameContent(key string, stored, put vocab.Object) (vocab.Object, error) {
	if stored.ContentSHA256() == put.ContentSHA256() {
		return stored, nil
	}
	return vocab.Object{}, fmt.Errorf("%w: %s holds sha256 %s, the new content is %s",
		ErrConflict, key, stored.ContentSHA256(), put.ContentSHA256())
}

// writeSidecar durably writes obj's sidecar (atomically replacing an orphan
// one left by a crash before the data was linked).
func (l *Local) writeSidecar(obj vocab.Object) error {
	p := l.sidecar(obj.Key)
	b, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	tmp, err := createTemp(filepath.Dir(p))
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return err
	}
	return syncDir(filepath.Dir(p))
}

// Stat reads the object's sidecar. A file without a sidecar (put by an older
// version, or copied in by hand) is described by hashing it: stored as is.
func (l *Local) Stat(_ context.Context, key string) (vocab.Object, error) {
	p, err := l.path(key)
	if err != nil {
		return vocab.Object{}, err
	}
	fi, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return vocab.Object{}, fmt.Errorf("%w: %s", ErrNotFound, key)
	} else if err != nil {
		return vocab.Object{}, fmt.Errorf("storage: stat %s: %w", key, err)
	}
	var obj vocab.Object
	b, err := os.ReadFile(l.sidecar(key))
	if err == nil && json.Unmarshal(b, &obj) == nil && obj.Key == key && obj.Size == fi.Size() {
		return obj, nil
	}
	f, err := os.Open(p)
	if err != nil {
		return vocab.Object{}, fmt.Errorf("storage: stat %s: %w", key, err)
	}
	defer f.Close()
	c := newCounter()
	if _, err := io.Copy(c, f); err != nil {
		return vocab.Object{}, fmt.Errorf("storage: stat %s: %w", key, err)
	}
	return vocab.Object{Key: key, Size: c.n, SHA256: c.sum(), ContentType: contentType(key, vocab.ObjectMeta{}, nil)}, nil
}

// Link returns the object's file:// URL (the stored bytes: compressed when
// Object.ContentEncoding says so), valid as long as the object is kept (0).
func (l *Local) Link(_ context.Context, key string) (string, time.Duration, error) {
	p, err := l.path(key)
	if err != nil {
		return "", 0, err
	}
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(p)}).String(), 0, nil
}

// Open reads an object back as it was put.
func (l *Local) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	rc, obj, err := l.OpenStored(ctx, key)
	if err != nil {
		return nil, err
	}
	d, err := decoder(rc, obj.ContentEncoding)
	if err != nil {
		return nil, fmt.Errorf("storage: open %s: %w", key, err)
	}
	return d, nil
}

// OpenStored reads the stored bytes and their description.
func (l *Local) OpenStored(ctx context.Context, key string) (io.ReadCloser, vocab.Object, error) {
	obj, err := l.Stat(ctx, key)
	if err != nil {
		return nil, vocab.Object{}, err
	}
	p, _ := l.path(key) // Stat checked it
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, vocab.Object{}, fmt.Errorf("%w: %s", ErrNotFound, key)
	} else if err != nil {
		return nil, vocab.Object{}, fmt.Errorf("storage: open %s: %w", key, err)
	}
	return f, obj, nil
}

// Delete removes the object and its sidecar, and the folders left empty.
func (l *Local) Delete(_ context.Context, key string) error {
	p, err := l.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("storage: delete %s: %w", key, err)
	}
	if err := os.Remove(l.sidecar(key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("storage: delete %s: sidecar: %w", key, err)
	}
	l.pruneDirs(filepath.Dir(p))
	l.pruneDirs(filepath.Dir(l.sidecar(key)))
	return nil
}

// pruneDirs removes dir and its parents up to the root while they are empty.
func (l *Local) pruneDirs(dir string) {
	for dir != l.root && strings.HasPrefix(dir, l.root+string(filepath.Separator)) {
		if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return // not empty: done
		}
		dir = filepath.Dir(dir)
	}
}

// List walks the objects whose key starts with prefix, in lexical order.
func (l *Local) List(ctx context.Context, prefix string, fn func(vocab.ListEntry) error) error {
	if err := ValidPrefix(prefix); err != nil {
		return err
	}
	// Walk from the deepest folder the prefix names fully, filter the rest.
	start := l.root
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		start = filepath.Join(l.root, filepath.FromSlash(prefix[:i]))
	}
	// An object or folder deleted while the walk passes (a concurrent Delete,
	// retention, a spool upload removing its file) is simply not listed: a
	// List sees each object that existed throughout it, and may or may not
	// see one that came or went meanwhile.
	err := filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			switch {
			case errors.Is(err, fs.ErrNotExist) && p == start:
				return filepath.SkipAll
			case errors.Is(err, fs.ErrNotExist):
				return nil // gone since its folder was read
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, _ := filepath.Rel(l.root, p)
		key := filepath.ToSlash(rel)
		if d.IsDir() {
			if p != start && (d.Name() == metaDir && filepath.Dir(p) == l.root || !dirMayMatch(key+"/", prefix)) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasPrefix(d.Name(), ".put-") || !strings.HasPrefix(key, prefix) || !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil // deleted since its folder was read
		} else if err != nil {
			return err
		}
		return fn(vocab.ListEntry{Key: key, Size: fi.Size()})
	})
	if err != nil {
		return fmt.Errorf("storage: list %q: %w", prefix, err)
	}
	return nil
}

// dirMayMatch reports whether keys below dir (ending in "/") can start with prefix.
func dirMayMatch(dir, prefix string) bool {
	return strings.HasPrefix(dir, prefix) || strings.HasPrefix(prefix, dir)
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

// writeTemp writes r to a new temporary file in dir (made if missing) and
// syncs it: the run row that will point at the object is committed durably,
// so the object must be on disk before that, not just in the page cache. It
// returns the file's path; the caller links or renames it into place and
// removes the path after. On error nothing is left behind.
func writeTemp(dir string, r io.Reader) (string, error) {
	tmp, err := createTemp(dir)
	if err != nil {
		return "", err
	}
	_, err = io.Copy(tmp, r)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	return tmp.Name(), nil
}

// createTemp makes dir with its parents and a temporary file in it. A Delete
// at the same moment prunes the folders it leaves empty, and may remove one
// between its creation and the file's (or a parent before its child is
// made): both are tried again then. Once the file exists its folder is not
// empty, so no prune removes it.
//
// "file exists" is tried again too: os.MkdirAll answers a failed Mkdir by
// Lstat-ing the path and returns Mkdir's EEXIST when that Lstat fails, which
// is what happens when another Put made the folder and a prune removed it
// between the two calls. A file where a folder must be is ENOTDIR
// (MkdirAll's first Stat sees it), never retried.
func createTemp(dir string) (*os.File, error) {
	var err error
	for range 20 {
		if err = os.MkdirAll(dir, 0o750); err == nil {
			var f *os.File
			if f, err = os.CreateTemp(dir, ".put-*"); err == nil {
				return f, nil
			}
		}
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
	}
	return nil, err
}
