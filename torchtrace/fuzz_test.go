package torchtrace

import (
	"bytes"
	"context"
	"math"
	"testing"

	"github.com/autocapture/autocapture/torchtrace/internal/gen"
)

// FuzzAnalyze: any input gives an error or a consistent report, never a
// panic or a hang. Run: go test -run '^$' -fuzz FuzzAnalyze -fuzztime 30s ./torchtrace
func FuzzAnalyze(f *testing.F) {
	small, _ := genTrace(f, gen.Config{Seed: 1, Steps: 1, Layers: 1, TP: 2}, false)
	f.Add(small)
	f.Add([]byte(`{"traceEvents":[{"ph":"X","cat":"kernel","name":"k","pid":0,"ts":1,"dur":2,"args":{"External id":1}}]}`))
	f.Add([]byte(`[{"ph":"X","cat":"cpu_op","name":"a\"]","args":{"External id":1}}]`))
	f.Add([]byte(`{"a":"\\\"","traceEvents":[],"b":[{"c":1}]}`))
	f.Add([]byte{0x1f, 0x8b, 8, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		r, err := Analyze(context.Background(), bytes.NewReader(in), Options{})
		if err != nil {
			return
		}
		var sum float64
		for _, s := range r.Families {
			if s < 0 || s > 1+1e-9 || math.IsNaN(s) {
				t.Fatalf("share %v", s)
			}
			sum += s
		}
		if r.KernelUS > 0 && math.Abs(sum-1) > 1e-6 {
			t.Fatalf("shares sum to %v", sum)
		}
		if r.IdleShare < 0 || r.IdleShare > 1 || math.IsNaN(r.IdleShare) {
			t.Fatalf("idle %v", r.IdleShare)
		}
	})
}
