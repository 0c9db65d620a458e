package storage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"mime"
	"net/http"
	"path"
	"strings"

	"github.com/autocapture/autocapture/vocab"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// Compression says how a store compresses text artifacts on the way in.
type Compression string

// The compressions a store can apply. Each is also the HTTP Content-Encoding
// the stored object carries, so a browser opens it as the original.
const (
	CompressionNone Compression = "none"
	CompressionGzip Compression = "gzip"
	CompressionZstd Compression = "zstd"
)

// DefaultCompression is gzip: every browser and `curl --compressed` decodes
// it (zstd is smaller and faster to write, but older browsers lack it).
const DefaultCompression = CompressionGzip

// ParseCompression accepts "", "none", "gzip" and "zstd" ("" is the default).
func ParseCompression(s string) (Compression, error) {
	switch c := Compression(s); c {
	case "":
		return DefaultCompression, nil
	case CompressionNone, CompressionGzip, CompressionZstd:
		return c, nil
	}
	return "", fmt.Errorf("storage: compression %q: want none, gzip or zstd", s)
}

// sniffLen is how many first bytes decide the content type and whether the
// bytes are already compressed.
const sniffLen = 512

// compressedExt are names whose content is already compressed: stored as put.
var compressedExt = map[string]bool{
	".gz": true, ".tgz": true, ".zst": true, ".zstd": true, ".png": true, ".jpg": true,
	".jpeg": true, ".gif": true, ".webp": true, ".zip": true, ".xz": true, ".bz2": true,
	".br": true, ".lz4": true, ".pb.gz": true, ".pprof": true,
}

// magics start already-compressed content: gzip (also pprof), zstd, PNG,
// zip, xz, bzip2, JPEG.
var magics = [][]byte{
	{0x1f, 0x8b}, {0x28, 0xb5, 0x2f, 0xfd}, {0x89, 'P', 'N', 'G'}, {'P', 'K', 0x03, 0x04},
	{0xfd, '7', 'z', 'X', 'Z', 0x00}, {'B', 'Z', 'h'}, {0xff, 0xd8, 0xff},
}

// alreadyCompressed reports whether the name or the first bytes say the
// content is compressed already.
func alreadyCompressed(key string, head []byte) bool {
	if compressedExt[strings.ToLower(path.Ext(key))] {
		return true
	}
	for _, m := range magics {
		if bytes.HasPrefix(head, m) {
			return true
		}
	}
	return false
}

// contentType is meta's type, else the extension's, else sniffed.
func contentType(key string, meta vocab.ObjectMeta, head []byte) string {
	if meta.ContentType != "" {
		return meta.ContentType
	}
	if t := mime.TypeByExtension(path.Ext(key)); t != "" {
		return t
	}
	return http.DetectContentType(head)
}

// textual reports whether a content type is text worth compressing.
func textual(ct string) bool {
	t, _, _ := mime.ParseMediaType(ct)
	switch {
	case strings.HasPrefix(t, "text/"), strings.HasSuffix(t, "+json"), strings.HasSuffix(t, "+xml"):
		return true
	}
	switch t {
	case "application/json", "application/x-ndjson", "application/xml", "application/yaml",
		"application/x-yaml", "application/javascript", "image/svg+xml", "application/openmetrics-text":
		return true
	}
	return false
}

// counter hashes and counts the bytes written to it.
type counter struct {
	h hash.Hash
	n int64
}

func newCounter() *counter { return &counter{h: sha256.New()} }

func (c *counter) Write(p []byte) (int, error) {
	c.h.Write(p)
	c.n += int64(len(p))
	return len(p), nil
}

func (c *counter) sum() string { return hex.EncodeToString(c.h.Sum(nil)) }

// encoding is one Put's byte pipeline: source → (compressor) → stored bytes,
// hashed and counted on both sides. Read the stored bytes from Reader until
// EOF, then call Finish.
type encoding struct {
	// Reader yields the bytes to store.
	Reader io.Reader

	key, contentType, enc string
	orig, stored          *counter
	done                  chan error     // the compressor goroutine's result
	pr                    *io.PipeReader // nil without compression
}

// newEncoding sniffs r and sets up the pipeline for key. It reads only the
// first sniffLen bytes; the rest flows as the caller reads Reader. Close it
// when done, whatever happened (it stops the compressor goroutine).
func newEncoding(ctx context.Context, key string, r io.Reader, meta vocab.ObjectMeta, c Compression) (*encoding, error) {
	src := ctxReader{ctx, r}
	head := make([]byte, sniffLen)
	n, err := io.ReadFull(src, head)
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		return nil, fmt.Errorf("storage: put %s: read: %w", key, err)
	}
	head = head[:n]
	e := &encoding{key: key, contentType: contentType(key, meta, head), orig: newCounter(), stored: newCounter()}
	full := io.TeeReader(io.MultiReader(bytes.NewReader(head), src), e.orig)
	if c == "" {
		c = DefaultCompression
	}
	if c == CompressionNone || alreadyCompressed(key, head) || !textual(e.contentType) {
		e.Reader = io.TeeReader(full, e.stored)
		return e, nil
	}
	e.enc = string(c)
	pr, pw := io.Pipe()
	e.pr, e.done = pr, make(chan error, 1)
	go func() {
		err := compress(pw, full, c)
		pw.CloseWithError(err)
		e.done <- err
	}()
	e.Reader = io.TeeReader(pr, e.stored)
	return e, nil
}

// compress copies src into w through the chosen encoder.
func compress(w io.Writer, src io.Reader, c Compression) error {
	var enc io.WriteCloser
	var err error
	switch c {
	case CompressionGzip:
		enc, err = gzip.NewWriterLevel(w, gzip.BestSpeed)
	case CompressionZstd:
		// One goroutine and a small window: bounded memory, deterministic
		// output, and a window every browser's zstd decoder accepts.
		enc, err = zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest),
			zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(1<<20), zstd.WithLowerEncoderMem(true))
	default:
		err = fmt.Errorf("unknown compression %q", c)
	}
	if err != nil {
		return err
	}
	if _, err := io.Copy(enc, src); err != nil {
		enc.Close()
		return err
	}
	return enc.Close()
}

// Close stops the compressor goroutine if it still runs and waits for it.
func (e *encoding) Close() {
	if e.pr == nil {
		return
	}
	e.pr.CloseWithError(io.ErrClosedPipe)
	if e.done != nil {
		<-e.done
		e.done = nil
	}
}

// Object reports what went through, after Reader reached EOF.
func (e *encoding) Object() vocab.Object {
	e.Close()
	o := vocab.Object{Key: e.key, Size: e.stored.n, SHA256: e.stored.sum(), ContentType: e.contentType, ContentEncoding: e.enc}
	if e.enc != "" {
		o.OriginalSize, o.OriginalSHA256 = e.orig.n, e.orig.sum()
	}
	return o
}

// decoder wraps stored bytes of encoding enc so they read as the original.
func decoder(rc io.ReadCloser, enc string) (io.ReadCloser, error) {
	switch enc {
	case "":
		return rc, nil
	case string(CompressionGzip):
		zr, err := gzip.NewReader(rc)
		if err != nil {
			rc.Close()
			return nil, err
		}
		return readCloser{zr, func() error { zr.Close(); return rc.Close() }}, nil
	case string(CompressionZstd):
		zr, err := zstd.NewReader(rc, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true))
		if err != nil {
			rc.Close()
			return nil, err
		}
		return readCloser{zr, func() error { zr.Close(); return rc.Close() }}, nil
	}
	rc.Close()
	return nil, fmt.Errorf("unknown content encoding %q", enc)
}

type readCloser struct {
	io.Reader
	close func() error
}

func (r readCloser) Close() error { return r.close() }

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
