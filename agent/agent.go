// Package agent is the profile sidecar: it runs beside vLLM on the volume the
// torch profiler writes into and serves those files, to the daemon only (a
// bearer token), so the daemon can collect a profile from a pod whose disk it
// cannot see. Dir reads a local folder; Server serves a Dir over HTTP; Client
// reads a Server. Dir and Client have the same methods: the profile step
// collects through either.
//
// CONTRACT (lead, 2026-12-01): the types and signatures below are fixed; the
// bodies are filled in by the agent owner.
package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// File is one file in the profiler's folder.
type File struct {
	// Name is the path relative to the folder, slash-separated.
	Name    string    `json:"name"`
	Size    int64     `json:"size"`
	ModTime time.Time `json:"mod_time"`
}

// ErrNotFound: no such file (or a name that escapes the folder).
var ErrNotFound = errors.New("agent: file not found")

// Dir is a local folder.
type Dir struct{ Path string }

// List returns the regular files under the folder modified at or after since
// (zero: all), sorted by name. Names that escape the folder are never listed.
func (d Dir) List(ctx context.Context, since time.Time) ([]File, error) {
	root, err := os.OpenRoot(d.Path)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	var out []File
	err = fs.WalkDir(root.FS(), ".", func(name string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
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
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Open streams one file. The folder is an os.Root: a name with "..", an
// absolute path or a symlink out of the folder is ErrNotFound.
func (d Dir) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	root, err := os.OpenRoot(d.Path)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	f, err := root.Open(filepath.FromSlash(name))
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	return f, nil
}

// Remove deletes one file (after it was uploaded).
func (d Dir) Remove(ctx context.Context, name string) error {
	root, err := os.OpenRoot(d.Path)
	if err != nil {
		return err
	}
	defer root.Close()
	if err := root.Remove(filepath.FromSlash(name)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: %s", ErrNotFound, name)
		}
		return err
	}
	return nil
}

// Client reads an agent over HTTP.
type Client struct {
	URL   string // e.g. http://10.0.0.7:9101
	Token string
	HTTP  *http.Client
}

// List is Dir.List over HTTP.
func (c *Client) List(ctx context.Context, since time.Time) ([]File, error) { return nil, nil }

// Open is Dir.Open over HTTP (streamed, never buffered whole).
func (c *Client) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	return nil, ErrNotFound
}

// Remove is Dir.Remove over HTTP.
func (c *Client) Remove(ctx context.Context, name string) error { return ErrNotFound }

// NewServer serves dir to holders of token (which must not be empty).
func NewServer(dir Dir, token string) (http.Handler, error) {
	return nil, errors.New("agent: not implemented")
}
