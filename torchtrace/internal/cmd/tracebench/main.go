// Command tracebench generates a large synthetic Kineto trace and measures
// torchtrace.Analyze on it: throughput of uncompressed JSON and peak RSS.
// bench/profile.sh drives it.
//
//	tracebench gen -out trace.json.gz -gz-bytes 1073741824
//	tracebench analyze trace.json.gz
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/autocapture/autocapture/torchtrace"
	"github.com/autocapture/autocapture/torchtrace/internal/gen"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: tracebench gen|analyze ...")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "gen":
		err = generate(os.Args[2:])
	case "analyze":
		err = analyze(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tracebench:", err)
		os.Exit(1)
	}
}

// counter counts the bytes written through it.
type counter struct {
	w io.Writer
	n int64
}

func (c *counter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func generate(args []string) error {
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	out := fs.String("out", "trace.pt.trace.json.gz", "file to write")
	gzBytes := fs.Int64("gz-bytes", 1<<30, "stop once the gzipped file reaches this size")
	tp := fs.Int("tp", 2, "tensor parallel size (adds NCCL kernels)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	cw := &counter{w: bw}
	zw, _ := gzip.NewWriterLevel(cw, gzip.DefaultCompression)
	begun := time.Now()
	truth, err := gen.Write(zw, gen.Config{Seed: 1, Layers: 32, TP: *tp, BaseNS: time.Now().UnixNano(),
		MaxBytes: *gzBytes, Sink: func() int64 { return cw.n }})
	if err == nil {
		err = zw.Close()
	}
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	fmt.Printf("wrote %s: %d gzipped bytes, %d steps, %d events in %v\n", *out, cw.n, truth.Steps, truth.Events,
		time.Since(begun).Round(time.Second))
	return nil
}

func analyze(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("analyze FILE")
	}
	f, err := os.Open(args[0])
	if err != nil {
		return err
	}
	defer f.Close()
	fi, _ := f.Stat()
	begun := time.Now()
	r, err := torchtrace.Analyze(context.Background(), f, torchtrace.Options{})
	if err != nil {
		return err
	}
	took := time.Since(begun)
	out := map[string]any{
		"file_bytes": fi.Size(), "json_bytes": r.BytesRead, "events": r.Events,
		"seconds": took.Seconds(), "mb_per_s": float64(r.BytesRead) / 1e6 / took.Seconds(),
		"peak_rss_mib": vmHWM() / 1024, "gomaxprocs": runtime.GOMAXPROCS(0),
		"summary": torchtrace.Summary(r, nil),
	}
	b, _ := json.MarshalIndent(out, "", "  ")
	fmt.Println(string(b))
	return nil
}

// vmHWM is the process's peak resident set, in KiB, from /proc.
func vmHWM() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), &kb)
			return kb
		}
	}
	return -1
}
