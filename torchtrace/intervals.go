package torchtrace

import (
	"cmp"
	"slices"
)

// interval is a busy stretch of one device, in trace microseconds.
type interval struct{ lo, hi float64 }

const (
	// batchIntervals are gathered, sorted and merged into the set at once:
	// events are not sorted in a trace, but sort-merging batches costs
	// O(n log b) whatever their order.
	batchIntervals = 1 << 15
	// maxIntervals bounds the disjoint busy stretches kept per device
	// (16 bytes each, twice while merging: ~16 MiB). Past it the shortest
	// gaps are closed (counted busy): see intervalSet.gapTol.
	maxIntervals = 1 << 19
)

// intervalSet is the union of a device's kernel intervals in bounded memory.
// It is exact until a device shows more than maxIntervals disjoint busy
// stretches; then gaps shorter than gapTol (doubling from 1 µs until the set
// fits in half the bound) are counted as busy, so the idle time it reports
// is low by at most those gaps.
type intervalSet struct {
	merged  []interval // sorted, disjoint, gaps > gapTol
	spare   []interval
	batch   []interval
	gapTol  float64
	coarsen int // how many times gaps were closed
	limit   int // maxIntervals unless set (tests)
}

func (s *intervalSet) add(lo, hi float64) {
	if hi <= lo {
		return
	}
	s.batch = append(s.batch, interval{lo, hi})
	if len(s.batch) >= batchIntervals {
		s.flush()
	}
}

// flush merges the batch into the set.
func (s *intervalSet) flush() {
	if len(s.batch) == 0 {
		return
	}
	slices.SortFunc(s.batch, func(a, b interval) int { return cmp.Compare(a.lo, b.lo) })
	out := s.spare[:0]
	i, j := 0, 0
	for i < len(s.merged) || j < len(s.batch) {
		var next interval
		if j >= len(s.batch) || (i < len(s.merged) && s.merged[i].lo <= s.batch[j].lo) {
			next = s.merged[i]
			i++
		} else {
			next = s.batch[j]
			j++
		}
		out = s.push(out, next)
	}
	s.spare, s.merged = s.merged, out
	s.batch = s.batch[:0]
	if len(s.merged) > s.max() {
		s.closeGaps()
	}
}

// push appends iv to out, a sorted run, joining it with the last stretch
// when they overlap or the gap between them is within gapTol.
func (s *intervalSet) push(out []interval, iv interval) []interval {
	if n := len(out); n > 0 && iv.lo-out[n-1].hi <= s.gapTol {
		out[n-1].hi = max(out[n-1].hi, iv.hi)
		return out
	}
	return append(out, iv)
}

func (s *intervalSet) max() int {
	if s.limit > 0 {
		return s.limit
	}
	return maxIntervals
}

// closeGaps doubles the gap tolerance and re-joins the set until it fits
// in half of its bound.
func (s *intervalSet) closeGaps() {
	for len(s.merged) > s.max()/2 {
		s.gapTol = max(1, 2*s.gapTol)
		s.coarsen++
		out := s.merged[:0]
		for _, iv := range s.merged {
			out = s.push(out, iv)
		}
		s.merged = out
	}
}

// busy is the length of the union.
func (s *intervalSet) busy() float64 {
	s.flush()
	var sum float64
	for _, iv := range s.merged {
		sum += iv.hi - iv.lo
	}
	return sum
}

// busyWithin is the length of the union inside [lo, hi].
func (s *intervalSet) busyWithin(lo, hi float64) float64 {
	s.flush()
	var sum float64
	for _, iv := range s.merged {
		if a, b := max(iv.lo, lo), min(iv.hi, hi); b > a {
			sum += b - a
		}
	}
	return sum
}
