package torchtrace

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// exactUnion is the union's length the slow way: sort everything, sweep.
func exactUnion(ivs []interval) (busy float64, runs []interval) {
	s := slices.Clone(ivs)
	slices.SortFunc(s, func(a, b interval) int {
		switch {
		case a.lo < b.lo:
			return -1
		case a.lo > b.lo:
			return 1
		}
		return 0
	})
	for _, iv := range s {
		if n := len(runs); n > 0 && iv.lo <= runs[n-1].hi {
			runs[n-1].hi = max(runs[n-1].hi, iv.hi)
			continue
		}
		runs = append(runs, iv)
	}
	for _, r := range runs {
		busy += r.hi - r.lo
	}
	return busy, runs
}

func randomIntervals(rng *rand.Rand, n int) []interval {
	out := make([]interval, n)
	for i := range out {
		lo := rng.Float64() * 1e6
		out[i] = interval{lo, lo + rng.Float64()*50}
	}
	return out
}

func TestIntervalUnionExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 10, 1000, 3*batchIntervals + 17} {
		ivs := randomIntervals(rng, n)
		var s intervalSet
		for _, iv := range ivs {
			s.add(iv.lo, iv.hi)
		}
		want, _ := exactUnion(ivs)
		if got := s.busy(); !near(got, want) {
			t.Errorf("n=%d: union %.3f, want %.3f", n, got, want)
		}
		if s.coarsen != 0 {
			t.Errorf("n=%d: gaps closed below the bound", n)
		}
	}
}

// TestIntervalUnionBounded: past the bound the set stays within it and the
// union errs only by the gaps it closed, each within the tolerance.
func TestIntervalUnionBounded(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	ivs := randomIntervals(rng, 200_000)
	s := intervalSet{limit: 4096}
	for _, iv := range ivs {
		s.add(iv.lo, iv.hi)
	}
	want, runs := exactUnion(ivs)
	got := s.busy()
	if len(s.merged) > 4096 {
		t.Fatalf("%d stretches kept, bound 4096", len(s.merged))
	}
	if s.coarsen == 0 {
		t.Fatal("the bound was never reached: the test proves nothing")
	}
	if got < want-1e-6 || got > want+s.gapTol*float64(len(runs)) {
		t.Errorf("union %.1f, exact %.1f, tolerance %.1f over %d gaps", got, want, s.gapTol, len(runs))
	}
	// The error is the closed gaps: no more idle than the exact idle.
	var closable float64
	for i := 1; i < len(runs); i++ {
		if g := runs[i].lo - runs[i-1].hi; g <= s.gapTol {
			closable += g
		}
	}
	if got-want > closable+1e-6 {
		t.Errorf("union grew by %.1f, more than the %.1f of gaps within the tolerance", got-want, closable)
	}
}

func TestLinkTable(t *testing.T) {
	lt := newLinkTable()
	lt.set(5, 3)
	lt.set(-7, 9)
	lt.set(linkChunk*10+1, 0)
	for id, want := range map[int64]int32{5: 3, -7: 9, linkChunk*10 + 1: 0} {
		if got, ok := lt.get(id); !ok || got != want {
			t.Errorf("get(%d) = %d, %v; want %d", id, got, ok, want)
		}
	}
	if _, ok := lt.get(6); ok {
		t.Error("an id never set is linked")
	}
	// Past the bound the oldest chunk goes, the newest stay.
	for i := range int64(maxLinkChunks + 1) {
		lt.set(linkChunk*(100+i), 1)
	}
	if len(lt.chunks) != maxLinkChunks || lt.drops == 0 {
		t.Fatalf("%d chunks kept (bound %d), %d dropped", len(lt.chunks), maxLinkChunks, lt.drops)
	}
	if _, ok := lt.get(5); ok {
		t.Error("the first chunk survived the bound")
	}
	if _, ok := lt.get(linkChunk * (100 + maxLinkChunks)); !ok {
		t.Error("the newest chunk was dropped")
	}
}
