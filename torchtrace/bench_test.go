package torchtrace

import (
	"bytes"
	"context"
	"testing"

	"github.com/autocapture/autocapture/torchtrace/internal/gen"
)

// BenchmarkAnalyze reads a generated ~110 MB (uncompressed) trace; MB/s is
// of uncompressed JSON. The 1 GiB figure: bench/profile.sh.
//
//	go test -run '^$' -bench Analyze -benchtime 3x ./torchtrace
func BenchmarkAnalyze(b *testing.B) {
	for _, tc := range []struct {
		name string
		gz   bool
	}{{"gzip", true}, {"plain", false}} {
		b.Run(tc.name, func(b *testing.B) {
			var raw bytes.Buffer
			if _, err := gen.Write(&raw, gen.Config{Seed: 1, Steps: 100, Layers: 32, TP: 2}); err != nil {
				b.Fatal(err)
			}
			data, _ := genTrace(b, gen.Config{Seed: 1, Steps: 100, Layers: 32, TP: 2}, tc.gz)
			b.SetBytes(int64(raw.Len()))
			b.ResetTimer()
			for range b.N {
				if _, err := Analyze(context.Background(), bytes.NewReader(data), Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
