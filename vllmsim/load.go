package vllmsim

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// arrival is a future request of the load generator: open-loop (client -1)
// or the next request of closed-loop client number client.
type arrival struct {
	at     time.Duration
	client int
	epoch  int
}

type arrivalHeap []arrival

func (h arrivalHeap) Len() int           { return len(h) }
func (h arrivalHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h arrivalHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *arrivalHeap) Push(x any)        { *h = append(*h, x.(arrival)) }
func (h *arrivalHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// loadGen is the built-in load generator: Poisson arrivals at spec.RPS and
// spec.Concurrency clients that each send their next request ThinkTime
// after the last one finished. Every draw comes from one seeded source, so a
// run is reproducible.
type loadGen struct {
	spec    LoadSpec
	rng     *rand.Rand
	epoch   int
	pending arrivalHeap
}

func newLoadGen(rng *rand.Rand) *loadGen { return &loadGen{rng: rng} }

// reset switches to spec at now: arrivals of the previous spec are dropped
// (requests already sent run to their end), the closed-loop clients start
// staggered over spec.RampUp.
func (g *loadGen) reset(spec LoadSpec, now time.Duration) {
	g.spec = spec
	g.epoch++
	g.pending = g.pending[:0]
	if spec.RPS > 0 {
		heap.Push(&g.pending, arrival{at: now + g.expo(1/spec.RPS), client: -1, epoch: g.epoch})
	}
	ramp := spec.RampUp
	if ramp <= 0 {
		ramp = time.Second
	}
	for i := range spec.Concurrency {
		at := now + time.Duration(float64(ramp)*float64(i)/float64(spec.Concurrency))
		heap.Push(&g.pending, arrival{at: at, client: i, epoch: g.epoch})
	}
}

// next returns when the next generated request arrives.
func (g *loadGen) next() (time.Duration, bool) {
	if len(g.pending) == 0 {
		return 0, false
	}
	return g.pending[0].at, true
}

// pop takes the next arrival and builds its request; an open-loop arrival
// schedules the one after it.
func (g *loadGen) pop() *request {
	a := heap.Pop(&g.pending).(arrival)
	if a.client < 0 && g.spec.RPS > 0 {
		heap.Push(&g.pending, arrival{at: a.at + g.expo(1/g.spec.RPS), client: -1, epoch: g.epoch})
	}
	return g.newRequest(a)
}

// clientDone schedules a closed-loop client's next request.
func (g *loadGen) clientDone(r *request, now time.Duration) {
	if r.client < 0 || r.loadEpoch != g.epoch || r.client >= g.spec.Concurrency {
		return
	}
	think := time.Duration(0)
	if g.spec.ThinkTime > 0 {
		think = g.expo(g.spec.ThinkTime.Seconds())
	}
	heap.Push(&g.pending, arrival{at: now + think, client: r.client, epoch: g.epoch})
}

func (g *loadGen) newRequest(a arrival) *request {
	s := g.spec
	prompt := int(g.sample(s.PromptTokens))
	target := int(g.sample(s.OutputTokens))
	maxTokens := max(s.MaxTokens, 1)
	r := &request{
		id:           fmt.Sprintf("cmpl-%016x%016x", g.rng.Uint64(), g.rng.Uint64()),
		prompt:       max(prompt, 1),
		sharedPrefix: min(s.SharedPrefix, prompt),
		target:       min(max(target, 1), maxTokens),
		maxTokens:    maxTokens,
		params:       requestParams{maxTokensSet: true, n: 1},
		client:       a.client,
		loadEpoch:    a.epoch,
		stream:       true, // chat clients stream; only SGLang's surface tells
	}
	if t := g.sample(s.Timeout); t > 0 {
		r.deadline = a.at + time.Duration(t*float64(time.Second))
	}
	return r
}

// expo draws an exponential duration with the given mean in seconds.
func (g *loadGen) expo(mean float64) time.Duration {
	return time.Duration(g.rng.ExpFloat64() * mean * float64(time.Second))
}

// sample draws from d.
func (g *loadGen) sample(d Dist) float64 {
	return sampleDist(g.rng, d)
}

// sampleDist draws from a clamped log-normal with mean d.Mean.
func sampleDist(rng *rand.Rand, d Dist) float64 {
	x := d.Mean
	if d.Sigma > 0 {
		x = d.Mean * math.Exp(d.Sigma*rng.NormFloat64()-d.Sigma*d.Sigma/2)
	}
	if d.Max > 0 {
		x = min(x, d.Max)
	}
	return max(x, d.Min)
}
