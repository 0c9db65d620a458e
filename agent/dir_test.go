package agent

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"
)

// fixture is a profiler folder with a file in a subfolder, an old file, and
// every kind of way out: a symlink to a file outside, a symlink to a folder
// outside, a symlink inside (allowed to open, never listed), a FIFO.
type fixture struct {
	dir, outside string
	old          time.Time
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	base := t.TempDir()
	dir := filepath.Join(base, "profiles")
	outside := filepath.Join(base, "secret.txt")
	must(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	must(t, os.WriteFile(outside, []byte("outside"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "a.pt.trace.json.gz"), []byte("trace-a"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "sub", "b.txt"), []byte("table-b"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "old.txt"), []byte("old"), 0o644))
	old := time.Now().Add(-time.Hour)
	must(t, os.Chtimes(filepath.Join(dir, "old.txt"), old, old))
	must(t, os.Symlink(outside, filepath.Join(dir, "out-link")))
	must(t, os.Symlink(base, filepath.Join(dir, "up-link")))
	must(t, os.Symlink("a.pt.trace.json.gz", filepath.Join(dir, "in-link")))
	must(t, syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	return fixture{dir: dir, outside: outside, old: old}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// escapes are names that must never reach a byte outside the folder, nor
// anything that is not a regular file inside it.
var escapes = []struct{ name, path string }{
	{"dot-dot", "../secret.txt"},
	{"dot-dot inside", "sub/../../secret.txt"},
	{"absolute", "/etc/passwd"},
	{"absolute to the outside file", "<outside>"},
	{"symlink to a file outside", "out-link"},
	{"through a symlinked folder", "up-link/secret.txt"},
	{"the folder itself", "."},
	{"empty", ""},
	{"a folder", "sub"},
	{"a FIFO", "fifo"},
	{"missing", "nope.txt"},
}

func TestDirList(t *testing.T) {
	fx := newFixture(t)
	d := Dir{Path: fx.dir}
	all, err := d.List(context.Background(), time.Time{})
	must(t, err)
	if got, want := names(all), []string{"a.pt.trace.json.gz", "old.txt", "sub/b.txt"}; !slices.Equal(got, want) {
		t.Errorf("all: %v, want %v (no symlinks, FIFOs or folders)", got, want)
	}
	recent, err := d.List(context.Background(), fx.old.Add(time.Second))
	must(t, err)
	if got, want := names(recent), []string{"a.pt.trace.json.gz", "sub/b.txt"}; !slices.Equal(got, want) {
		t.Errorf("since: %v, want %v", got, want)
	}
	at, err := d.List(context.Background(), fx.old)
	must(t, err)
	if len(at) != 3 {
		t.Errorf("since == mtime excluded the file: %v", names(at))
	}
	for _, f := range all {
		st, _ := os.Stat(filepath.Join(fx.dir, f.Name))
		if f.Size != st.Size() || !f.ModTime.Equal(st.ModTime()) {
			t.Errorf("%s: size %d mtime %v, disk %d %v", f.Name, f.Size, f.ModTime, st.Size(), st.ModTime())
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := d.List(ctx, time.Time{}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled list: %v", err)
	}
	if _, err := (Dir{Path: filepath.Join(fx.dir, "gone")}).List(context.Background(), time.Time{}); err == nil {
		t.Error("a missing folder listed without error")
	}
}

func TestDirRefusesEscapes(t *testing.T) {
	fx := newFixture(t)
	d := Dir{Path: fx.dir}
	for _, tt := range escapes {
		name := tt.path
		if name == "<outside>" {
			name = fx.outside
		}
		t.Run(tt.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				rc, err := d.Open(context.Background(), name)
				if err == nil {
					rc.Close()
				}
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, ErrNotFound) {
					t.Errorf("Open(%q) = %v, want ErrNotFound", name, err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("Open(%q) blocked", name)
			}
			if err := d.Remove(context.Background(), name); !errors.Is(err, ErrNotFound) {
				t.Errorf("Remove(%q) = %v, want ErrNotFound", name, err)
			}
		})
	}
	if _, err := os.Stat(fx.outside); err != nil {
		t.Errorf("the outside file is gone: %v", err)
	}
	for _, keep := range []string{"sub", "fifo", "out-link", "up-link"} {
		if _, err := os.Lstat(filepath.Join(fx.dir, keep)); err != nil {
			t.Errorf("%s was removed: %v", keep, err)
		}
	}
}

func TestDirOpenAndRemove(t *testing.T) {
	fx := newFixture(t)
	d := Dir{Path: fx.dir}
	for name, want := range map[string]string{"sub/b.txt": "table-b", "in-link": "trace-a"} {
		rc, err := d.Open(context.Background(), name)
		must(t, err)
		b, _ := io.ReadAll(rc)
		rc.Close()
		if string(b) != want {
			t.Errorf("%s: %q, want %q", name, b, want)
		}
	}
	must(t, d.Remove(context.Background(), "sub/b.txt"))
	if _, err := os.Stat(filepath.Join(fx.dir, "sub", "b.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("removed file still there: %v", err)
	}
	if err := d.Remove(context.Background(), "sub/b.txt"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second remove: %v", err)
	}
}

func names(fs []File) []string {
	out := []string{}
	for _, f := range fs {
		out = append(out, f.Name)
	}
	return out
}
