package storage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/autocapture/autocapture/vocab"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// newStoreFunc makes an empty store with the given compression for one subtest.
type newStoreFunc func(t *testing.T, c Compression) vocab.Store

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func readAll(t *testing.T, rc io.ReadCloser, err error) []byte {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// openAll reads key back through Open.
func openAll(t *testing.T, s vocab.Store, key string) []byte {
	t.Helper()
	rc, err := s.Open(context.Background(), key)
	return readAll(t, rc, err)
}

// spanJSON is Chrome-trace-like text: compressible, not trivially.
func spanJSON(n int) []byte {
	var b bytes.Buffer
	r := rand.New(rand.NewPCG(1, 2))
	b.WriteString(`{"traceEvents":[`)
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, `{"name":"llm_request","ph":"X","ts":%d,"dur":%d,"pid":1,"tid":%d,"args":{"request_id":"%016x"}},`,
			i*1000, r.IntN(90000), r.IntN(8), r.Uint64())
	}
	b.WriteString(`{}]}`)
	return b.Bytes()
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func gzipped(t *testing.T, b []byte) []byte {
	var out bytes.Buffer
	w := gzip.NewWriter(&out)
	w.Write(b)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// decodeAs decodes stored bytes with a stock decoder, as a browser would.
func decodeAs(t *testing.T, enc string, stored []byte) []byte {
	t.Helper()
	switch enc {
	case "gzip":
		r, err := gzip.NewReader(bytes.NewReader(stored))
		return readAll(t, io.NopCloser(r), err)
	case "zstd":
		r, err := zstd.NewReader(bytes.NewReader(stored))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		b, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return stored
}

// testStoreBehaviour is what every backend must do, whatever it stores on.
func testStoreBehaviour(t *testing.T, newStore newStoreFunc) {
	ctx := context.Background()
	text := spanJSON(3 << 20)
	binary := randomBytes(1 << 20)
	preGzipped := gzipped(t, spanJSON(200<<10))

	roundTrips := []struct {
		name        string
		compression Compression
		key         string
		body        []byte
		meta        vocab.ObjectMeta
		wantEnc     string
	}{
		{"text compressed with gzip", CompressionGzip, "a/trace.json", text, vocab.ObjectMeta{}, "gzip"},
		{"text compressed with zstd", CompressionZstd, "a/trace.json", text, vocab.ObjectMeta{}, "zstd"},
		{"text with compression off", CompressionNone, "a/trace.json", text, vocab.ObjectMeta{}, ""},
		{"binary stored as is", CompressionGzip, "a/profile.bin", binary, vocab.ObjectMeta{ContentType: "application/octet-stream"}, ""},
		{"gzip magic passes through", CompressionGzip, "a/trace-json", preGzipped, vocab.ObjectMeta{ContentType: "application/json"}, ""},
		{".gz name passes through", CompressionZstd, "a/trace.json.gz", preGzipped, vocab.ObjectMeta{}, ""},
		{"png passes through", CompressionGzip, "a/chart.png", append([]byte("\x89PNG\r\n\x1a\n"), binary[:4096]...), vocab.ObjectMeta{}, ""},
		{"empty object", CompressionGzip, "a/empty.txt", nil, vocab.ObjectMeta{}, "gzip"},
	}
	for _, tc := range roundTrips {
		t.Run("round trip/"+tc.name, func(t *testing.T) {
			s := newStore(t, tc.compression)
			obj, err := s.Put(ctx, tc.key, bytes.NewReader(tc.body), tc.meta)
			if err != nil {
				t.Fatal(err)
			}
			if obj.ContentEncoding != tc.wantEnc {
				t.Errorf("content encoding %q, want %q", obj.ContentEncoding, tc.wantEnc)
			}
			if obj.ContentSHA256() != sum(tc.body) {
				t.Errorf("content sha256 %s, want %s", obj.ContentSHA256(), sum(tc.body))
			}
			if got := openAll(t, s, tc.key); !bytes.Equal(got, tc.body) {
				t.Fatalf("Open gave %d bytes, want the %d put", len(got), len(tc.body))
			}
			rc, stat, err := s.OpenStored(ctx, tc.key)
			stored := readAll(t, rc, err)
			if sum(stored) != obj.SHA256 || int64(len(stored)) != obj.Size {
				t.Errorf("stored %d bytes sha256 %s, Put reported %d %s", len(stored), sum(stored), obj.Size, obj.SHA256)
			}
			if stat != obj {
				t.Errorf("OpenStored object %+v, Put reported %+v", stat, obj)
			}
			if got := decodeAs(t, obj.ContentEncoding, stored); !bytes.Equal(got, tc.body) {
				t.Errorf("a stock %q decoder does not give back the bytes put", obj.ContentEncoding)
			}
			if tc.wantEnc == "" && !bytes.Equal(stored, tc.body) {
				t.Errorf("stored bytes differ from the bytes put without an encoding")
			}
			if tc.wantEnc != "" && len(tc.body) > 0 && (obj.OriginalSize != int64(len(tc.body)) || obj.Size >= obj.OriginalSize/3) {
				t.Errorf("compressed %d → %d bytes (original size recorded %d)", len(tc.body), obj.Size, obj.OriginalSize)
			}
			if st, err := s.Stat(ctx, tc.key); err != nil || st != obj {
				t.Errorf("Stat = %+v, %v; want %+v", st, err, obj)
			}
		})
	}

	t.Run("content type guessed and kept", func(t *testing.T) {
		s := newStore(t, CompressionGzip)
		for key, want := range map[string]string{"t/x.json": "application/json", "t/x.png": "image/png", "t/x": "text/plain; charset=utf-8"} {
			obj, err := s.Put(ctx, key, strings.NewReader("hello world"), vocab.ObjectMeta{})
			if err != nil {
				t.Fatal(err)
			}
			if st, _ := s.Stat(ctx, key); obj.ContentType != want || st.ContentType != want {
				t.Errorf("%s: content type %q (stat %q), want %q", key, obj.ContentType, st.ContentType, want)
			}
		}
	})

	t.Run("re-put is idempotent, different content refused", func(t *testing.T) {
		s := newStore(t, CompressionGzip)
		first, err := s.Put(ctx, "r/out.json", bytes.NewReader(text), vocab.ObjectMeta{})
		if err != nil {
			t.Fatal(err)
		}
		again, err := s.Put(ctx, "r/out.json", bytes.NewReader(text), vocab.ObjectMeta{})
		if err != nil || again != first {
			t.Fatalf("same bytes again: %+v, %v; want %+v, nil", again, err, first)
		}
		other := append(slices.Clone(text[:len(text)-10]), []byte(`,{}]}     `)...)
		if _, err := s.Put(ctx, "r/out.json", bytes.NewReader(other), vocab.ObjectMeta{}); !errors.Is(err, ErrConflict) {
			t.Fatalf("different bytes: err %v, want ErrConflict", err)
		}
		if got := openAll(t, s, "r/out.json"); !bytes.Equal(got, text) {
			t.Fatal("the refused put changed the stored object")
		}
		rc, st, err := s.OpenStored(ctx, "r/out.json")
		if stored := readAll(t, rc, err); sum(stored) != st.SHA256 || st != first {
			t.Fatalf("after the refused put the recorded sha256 %s is not the stored bytes' %s", st.SHA256, sum(stored))
		}
	})

	t.Run("list and delete", func(t *testing.T) {
		s := newStore(t, CompressionGzip)
		keys := []string{"2026/11/30/A/r1/p/s/a.json", "2026/11/30/A/r1/p/s/b.png", "2026/11/30/B/r2/p/s/c.txt", "2026/12/01/A/r3/p/s/d.txt"}
		for _, k := range keys {
			if _, err := s.Put(ctx, k, strings.NewReader("content of "+k), vocab.ObjectMeta{}); err != nil {
				t.Fatal(err)
			}
		}
		list := func(prefix string) []string {
			var got []string
			if err := s.List(ctx, prefix, func(e vocab.ListEntry) error {
				if e.Size <= 0 {
					t.Errorf("%s: size %d", e.Key, e.Size)
				}
				got = append(got, e.Key)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			return got
		}
		for _, c := range []struct {
			prefix string
			want   []string
		}{
			{"", keys},
			{"2026/11/", keys[:3]},
			{"2026/11/30/A/", keys[:2]},
			{"2026/1", keys},
			{"2026/11/30/A/r1/p/s/b", keys[1:2]},
			{"2027/", nil},
		} {
			if got := list(c.prefix); !slices.Equal(got, c.want) {
				t.Errorf("List(%q) = %q, want %q", c.prefix, got, c.want)
			}
		}
		stop := errors.New("stop")
		n := 0
		if err := s.List(ctx, "", func(vocab.ListEntry) error { n++; return stop }); !errors.Is(err, stop) || n != 1 {
			t.Errorf("List did not stop at fn's error: %v after %d", err, n)
		}
		if err := s.Delete(ctx, keys[0]); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, keys[0]); err != nil {
			t.Fatalf("deleting a missing key: %v", err)
		}
		if _, err := s.Open(ctx, keys[0]); !errors.Is(err, ErrNotFound) {
			t.Errorf("Open after Delete: %v, want ErrNotFound", err)
		}
		if _, err := s.Stat(ctx, keys[0]); !errors.Is(err, ErrNotFound) {
			t.Errorf("Stat after Delete: %v, want ErrNotFound", err)
		}
		if got := list("2026/11/30/"); !slices.Equal(got, keys[1:3]) {
			t.Errorf("after Delete List = %q, want %q", got, keys[1:3])
		}
		if _, err := s.Put(ctx, keys[0], strings.NewReader("new content"), vocab.ObjectMeta{}); err != nil {
			t.Errorf("put after delete: %v", err)
		}
	})

	t.Run("failed put leaves nothing", func(t *testing.T) {
		s := newStore(t, CompressionGzip)
		cctx, cancel := context.WithCancel(ctx)
		r := io.MultiReader(bytes.NewReader(text[:1<<20]), readerFunc(func([]byte) (int, error) {
			cancel()
			return 0, errors.New("source broke")
		}))
		if _, err := s.Put(cctx, "f/broken.json", r, vocab.ObjectMeta{}); err == nil {
			t.Fatal("a put whose source failed succeeded")
		}
		if err := s.List(ctx, "", func(e vocab.ListEntry) error { return fmt.Errorf("left %s behind", e.Key) }); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Put(ctx, "f/broken.json", bytes.NewReader(text), vocab.ObjectMeta{}); err != nil {
			t.Fatalf("put after a failed put: %v", err)
		}
	})

	t.Run("missing and invalid keys", func(t *testing.T) {
		s := newStore(t, CompressionGzip)
		if _, err := s.Open(ctx, "no/such"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Open: %v", err)
		}
		if _, _, err := s.OpenStored(ctx, "no/such"); !errors.Is(err, ErrNotFound) {
			t.Errorf("OpenStored: %v", err)
		}
		for _, k := range []string{"../escape", "/abs", "a//b"} {
			if _, err := s.Put(ctx, k, strings.NewReader("x"), vocab.ObjectMeta{}); err == nil {
				t.Errorf("Put(%q) accepted", k)
			}
		}
	})
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }
