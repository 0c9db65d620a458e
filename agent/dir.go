package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"

	"time"
)

// Dir is a local folder.
type Dir struct{ Path string }

// List returns the regular files under the folder modified at or after since
// (zero: all), sorted by name. Names that escape the folder are never listed:
// symlinks are skipped, not followed.
func (d Dir) List(ctx context.Context, since time.Time) ([]File, error) {
	root, err := os.OpenRoot(d.Path)
	if err != nil {
		return nil, fmt.Errorf("agent: folder: %w", err)
	}
	defer root.Close()
	out := []File{}
	err = fs.WalkDir(root.FS(), ".", func(name string, e fs.DirEntry, err error) error {
		if err != nil {
			if name != "." && errors.Is(err, fs.ErrNotExist) {
				return nil // removed while we walked
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if !e.Type().IsRegular() {
			return nil
		}
		info, err := e.Info()
		if err != nil {
			return nil // removed meanwhile
		}
		if !since.IsZero() && info.ModTime().Before(since) {
			return nil
		}
		out = append(out, File{Name: name, Size: info.Size(), ModTime: info.ModTime()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("agent: list %s: %w", d.Path, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Snapshot is List with the local clock, read before the walk: a file
// modified during the walk is at or after Now and is listed again next time.
func (d Dir) Snapshot(ctx context.Context, since time.Time) (Listing, error) {
	now := time.Now()
	files, err := d.List(ctx, since)
	return Listing{Files: files, Now: now}, err
}

// Open streams one file. The folder is an os.Root: a name with "..", an
// absolute path or a symlink out of the folder is ErrNotFound.
func (d Dir) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	f, _, err := d.open(name)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// open opens a regular file inside the folder and stats it. O_NONBLOCK keeps
// a FIFO planted in the folder from blocking the open; it is then refused as
// not regular (on a regular file the flag does nothing).
func (d Dir) open(name string) (*os.File, fs.FileInfo, error) {
	if !validName(name) {
		return nil, nil, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	root, err := os.OpenRoot(d.Path)
	if err != nil {
		return nil, nil, fmt.Errorf("agent: folder: %w", err)
	}
	defer root.Close()
	f, err := root.OpenFile(filepath.FromSlash(name), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, openError(name, err)
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	return f, st, nil
}

// Remove deletes one regular file (after it was uploaded); a folder, a
// symlink or a name outside the folder is ErrNotFound.
func (d Dir) Remove(ctx context.Context, name string) error {
	if !validName(name) {
		return fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	root, err := os.OpenRoot(d.Path)
	if err != nil {
		return fmt.Errorf("agent: folder: %w", err)
	}
	defer root.Close()
	p := filepath.FromSlash(name)
	st, err := root.Lstat(p)
	if err != nil {
		return openError(name, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	if err := root.Remove(p); err != nil {
		return openError(name, err)
	}
	return nil
}

// validName: slash-separated, relative, no "." or ".." element, not the
// folder itself. os.Root refuses escapes anyway; this also refuses the
// names that stay inside but are not file names ("a/../b", "./a").
func validName(name string) bool {
	return name != "." && fs.ValidPath(name)
}

// openError maps an os.Root error: a permission problem is the agent's
// (reported as such); missing or escaping names are ErrNotFound.
func openError(name string, err error) error {
	if errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("agent: %q: %w", name, err)
	}
	return fmt.Errorf("%w: %q", ErrNotFound, name)
}
