package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestClient(t *testing.T) {
	s := serveFixture(t, ServerOptions{})
	c := &Client{URL: s.url + "/", Token: testToken}
	ctx := context.Background()

	before := time.Now()
	l, err := c.Snapshot(ctx, s.fx.old.Add(time.Second))
	must(t, err)
	if got := names(l.Files); len(got) != 2 || got[1] != "sub/b.txt" {
		t.Errorf("snapshot files %v", got)
	}
	if l.Now.Before(before.Add(-time.Minute)) || l.Now.After(time.Now().Add(time.Minute)) {
		t.Errorf("snapshot now %v", l.Now)
	}
	all, err := c.List(ctx, time.Time{})
	must(t, err)
	if len(all) != 3 {
		t.Errorf("list all: %v", names(all))
	}

	rc, err := c.Open(ctx, "sub/b.txt")
	must(t, err)
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "table-b" {
		t.Errorf("open: %q", b)
	}
	rc, err = c.OpenFrom(ctx, "sub/b.txt", 6)
	must(t, err)
	b, _ = io.ReadAll(rc)
	rc.Close()
	if string(b) != "b" {
		t.Errorf("open from 6: %q", b)
	}

	must(t, c.Remove(ctx, "sub/b.txt"))
	for name, err := range map[string]error{
		"open removed":   openErr(c.Open(ctx, "sub/b.txt")),
		"remove removed": c.Remove(ctx, "sub/b.txt"),
		"open escape":    openErr(c.Open(ctx, "../secret.txt")),
		"open symlink":   openErr(c.Open(ctx, "out-link")),
		"remove escape":  c.Remove(ctx, "../secret.txt"),
	} {
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: %v, want ErrNotFound", name, err)
		}
	}
}

func openErr(rc io.ReadCloser, err error) error {
	if rc != nil {
		rc.Close()
	}
	return err
}

func TestClientErrors(t *testing.T) {
	s := serveFixture(t, ServerOptions{})
	ctx := context.Background()
	wrong := &Client{URL: s.url, Token: "not-the-token"}
	_, err := wrong.List(ctx, time.Time{})
	if !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "wrong bearer token") {
		t.Errorf("wrong token: %v, want ErrUnauthorized saying why", err)
	}
	if err != nil && strings.Contains(err.Error(), "not-the-token") {
		t.Errorf("the error shows the token: %v", err)
	}

	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	_, err = (&Client{URL: deadURL, Token: testToken}).List(ctx, time.Time{})
	if !errors.Is(err, ErrUnreachable) || errors.Is(err, ErrNotFound) {
		t.Errorf("closed port: %v, want ErrUnreachable", err)
	}

	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusInternalServerError, errorBody{Status: "error", Error: "list_failed", Reason: "disk on fire"})
	}))
	defer broken.Close()
	_, err = (&Client{URL: broken.URL, Token: testToken}).List(ctx, time.Time{})
	var se *StatusError
	if !errors.As(err, &se) || se.Code != 500 || se.Word != "list_failed" || !strings.Contains(err.Error(), "disk on fire") {
		t.Errorf("500: %v, want a StatusError with the reason", err)
	}

	for _, u := range []string{"", "10.0.0.7:9101", "ftp://x", "http://user:pw@/"} {
		_, err := (&Client{URL: u, Token: testToken}).List(ctx, time.Time{})
		if err == nil || strings.Contains(err.Error(), "pw") {
			t.Errorf("URL %q: %v, want a clear refusal without the password", u, err)
		}
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = (&Client{URL: s.url, Token: testToken}).List(cctx, time.Time{})
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnreachable) {
		t.Errorf("cancelled: %v, want context.Canceled, not unreachable", err)
	}
}

// sparse makes a file of size bytes that takes no disk (zeros, with a
// marker at both ends so an offset mistake changes the digest).
func sparse(t testing.TB, dir string, size int64) string {
	t.Helper()
	p := filepath.Join(dir, "big.pt.trace.json.gz")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("head"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("tail"), size-4); err != nil {
		t.Fatal(err)
	}
	return p
}

func digestFile(t testing.TB, p string) [32]byte {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return [32]byte(h.Sum(nil))
}

// countingWriter counts what passes through.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// TestClientStreamsBoundedMemory streams 128 MiB through the server and the
// client in this one process: the bytes match the file, and the heap
// allocated on both sides together stays a small fraction of the file, so
// neither side buffers it whole.
func TestClientStreamsBoundedMemory(t *testing.T) {
	const size = 128 << 20
	s := serveFixture(t, ServerOptions{})
	p := sparse(t, s.fx.dir, size)
	want := digestFile(t, p)
	c := &Client{URL: s.url, Token: testToken}

	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	rc, err := c.Open(context.Background(), filepath.Base(p))
	must(t, err)
	h := sha256.New()
	cw := &countingWriter{w: h}
	_, err = io.Copy(cw, rc)
	rc.Close()
	must(t, err)
	runtime.ReadMemStats(&m1)
	if cw.n != size || [32]byte(h.Sum(nil)) != want {
		t.Fatalf("streamed %d bytes, digest match %v; want %d and a match", cw.n, [32]byte(h.Sum(nil)) == want, size)
	}
	if alloc := m1.TotalAlloc - m0.TotalAlloc; alloc > size/8 {
		t.Errorf("streaming %d MiB allocated %d MiB: something buffers the file", size>>20, alloc>>20)
	}
}

// TestClientResumesWithRange: a stream cut part-way is resumed from the
// byte reached, and the joined bytes are the file.
func TestClientResumesWithRange(t *testing.T) {
	// Large enough that the rest cannot already sit in loopback's socket
	// buffers when the stream is cancelled (at 8 MiB it sometimes did, and
	// the cancelled read then ended cleanly).
	const size = 128 << 20
	s := serveFixture(t, ServerOptions{})
	p := sparse(t, s.fx.dir, size)
	c := &Client{URL: s.url, Token: testToken}
	ctx, cancel := context.WithCancel(context.Background())
	rc, err := c.Open(ctx, filepath.Base(p))
	must(t, err)
	var got bytes.Buffer
	if _, err := io.CopyN(&got, rc, 1<<20); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := io.Copy(io.Discard, rc); err == nil {
		t.Fatal("a cancelled stream read to the end without error")
	}
	rc.Close()
	rc, err = c.OpenFrom(context.Background(), filepath.Base(p), int64(got.Len()))
	must(t, err)
	_, err = io.Copy(&got, rc)
	rc.Close()
	must(t, err)
	if sha256.Sum256(got.Bytes()) != digestFile(t, p) {
		t.Errorf("resumed bytes (%d) differ from the file", got.Len())
	}
	if _, err := c.OpenFrom(context.Background(), filepath.Base(p), size); err == nil {
		t.Error("OpenFrom past the end succeeded")
	}
}

// BenchmarkClientOpen streams a 64 MiB file through Server and Client over
// loopback: MB/s and the heap allocated per stream.
func BenchmarkClientOpen(b *testing.B) {
	const size = 64 << 20
	dir := b.TempDir()
	s, err := NewServerWith(ServerOptions{Dir: Dir{Path: dir}, Token: testToken})
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(s)
	defer hs.Close()
	p := sparse(b, dir, size)
	c := &Client{URL: hs.URL, Token: testToken}
	b.SetBytes(size)
	b.ReportAllocs()
	for b.Loop() {
		rc, err := c.Open(context.Background(), filepath.Base(p))
		if err != nil {
			b.Fatal(err)
		}
		if n, err := io.Copy(io.Discard, rc); err != nil || n != size {
			b.Fatalf("%d bytes, %v", n, err)
		}
		rc.Close()
	}
}
