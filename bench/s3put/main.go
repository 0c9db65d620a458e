// Command s3put puts one stream into an S3 bucket through autocapture's
// storage path (sniff, optional compression, hashing, multipart upload) and
// prints one JSON line: bytes read, bytes stored, seconds, and the process's
// peak resident memory (VmHWM). bench/storage.sh and the storage package's
// bounded-memory test run it; credentials come from the SDK's default chain
// (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment), never
// from the command line.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vocab"
)

// result is the line s3put prints.
type result struct {
	Key            string  `json:"key"`
	BytesIn        int64   `json:"bytes_in"`
	BytesStored    int64   `json:"bytes_stored"`
	Encoding       string  `json:"encoding"`
	SHA256         string  `json:"sha256"`
	Seconds        float64 `json:"seconds"`
	PeakRSSKiB     int64   `json:"peak_rss_kib"`
	MiBPerSecondIn float64 `json:"mib_per_s_in"`
}

func main() {
	var o storage.S3Options
	var file, gen string
	var size int64
	var key string
	flag.StringVar(&o.Endpoint, "endpoint", "", "S3 endpoint URL (empty: AWS)")
	flag.StringVar(&o.Bucket, "bucket", "", "bucket")
	flag.StringVar(&o.Region, "region", "us-east-1", "region")
	flag.StringVar(&o.Prefix, "prefix", "", "key prefix")
	flag.BoolVar(&o.PathStyle, "path-style", true, "path-style addressing")
	flag.Int64Var(&o.PartSize, "part-size", 0, "multipart part size in bytes (0: default)")
	flag.IntVar(&o.Concurrency, "concurrency", 0, "parts in flight (0: default)")
	comp := flag.String("compression", "gzip", "none, gzip or zstd")
	flag.StringVar(&key, "key", "bench/object", "object key")
	flag.StringVar(&file, "file", "", "file to put (instead of -generate)")
	flag.StringVar(&gen, "generate", "", "generate the stream: random or json")
	flag.Int64Var(&size, "size", 100<<20, "bytes to generate")
	spoolDir := flag.String("spool", "", "put through a storage.Spool in this folder (written first, then uploaded from the file)")
	flag.Parse()
	spool = *spoolDir
	o.Compression = storage.Compression(*comp)
	if err := run(o, key, file, gen, size); err != nil {
		fmt.Fprintln(os.Stderr, "s3put:", err)
		os.Exit(1)
	}
}

// spool is -spool.
var spool string

func run(o storage.S3Options, key, file, gen string, size int64) error {
	ctx := context.Background()
	var src io.Reader
	meta := vocab.ObjectMeta{}
	switch {
	case file != "":
		f, err := os.Open(file)
		if err != nil {
			return err
		}
		defer f.Close()
		src = f
	case gen == "random":
		src = io.LimitReader(rand.NewChaCha8([32]byte{1}), size)
		meta.ContentType = "application/octet-stream"
	case gen == "json":
		src = io.LimitReader(&spans{r: rand.New(rand.NewPCG(1, 2))}, size)
	default:
		return fmt.Errorf("give -file or -generate random|json")
	}
	s, err := storage.NewS3(ctx, o)
	if err != nil {
		return err
	}
	if err := s.Check(ctx); err != nil {
		return err
	}
	var store vocab.Store = s
	if spool != "" {
		if store, err = storage.NewSpool(s, spool, o.Compression); err != nil {
			return err
		}
	}
	counted := &countReader{r: src}
	start := time.Now()
	obj, err := store.Put(ctx, key, counted, meta)
	if err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	return json.NewEncoder(os.Stdout).Encode(result{
		Key: obj.Key, BytesIn: counted.n, BytesStored: obj.Size, Encoding: obj.ContentEncoding, SHA256: obj.ContentSHA256(),
		Seconds: secs, PeakRSSKiB: peakRSS(), MiBPerSecondIn: float64(counted.n) / (1 << 20) / secs,
	})
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// spans streams Chrome-trace-like JSON events forever.
type spans struct {
	r    *rand.Rand
	buf  []byte
	i    int
	open bool
}

func (s *spans) Read(p []byte) (int, error) {
	if !s.open {
		s.buf, s.open = []byte(`{"traceEvents":[`), true
	}
	n := 0
	for n < len(p) {
		if len(s.buf) == 0 {
			s.i++
			s.buf = fmt.Appendf(s.buf[:0], `{"name":"llm_request","cat":"vllm","ph":"X","ts":%d,"dur":%d,"pid":1,"tid":%d,"args":{"request_id":"cmpl-%016x","prompt_tokens":%d,"output_tokens":%d}},`+"\n",
				int64(s.i)*1370, s.r.IntN(900000), s.r.IntN(16), s.r.Uint64(), s.r.IntN(8192), s.r.IntN(2048))
		}
		c := copy(p[n:], s.buf)
		s.buf = s.buf[c:]
		n += c
	}
	return n, nil
}

// peakRSS is VmHWM from /proc/self/status in KiB (0 if unreadable).
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kib int64
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kib)
			return kib
		}
	}
	return 0
}
