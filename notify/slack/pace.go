package slack

import (
	"context"
	"sync"
	"time"
)

// pacer spaces posts per channel with one token bucket each: Slack takes
// about one chat.postMessage a second per channel and tolerates short bursts,
// so a storm of runs queues here instead of collecting 429s.
type pacer struct {
	rate  float64 // tokens a second
	burst float64
	now   func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

func newPacer(perSecond float64, burst int, now func() time.Time) *pacer {
	return &pacer{rate: perSecond, burst: float64(burst), now: now, buckets: map[string]*bucket{}}
}

// reserve takes a token for channel and says how long to wait before using
// it; tokens may go negative, so waiters queue in order.
func (p *pacer) reserve(channel string) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	b := p.buckets[channel]
	if b == nil {
		b = &bucket{tokens: p.burst, last: now}
		p.buckets[channel] = b
	}
	b.tokens = min(p.burst, b.tokens+now.Sub(b.last).Seconds()*p.rate)
	b.last = now
	b.tokens--
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / p.rate * float64(time.Second))
}

// cancel gives back a token reserved by a wait that did not happen.
func (p *pacer) cancel(channel string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if b := p.buckets[channel]; b != nil {
		b.tokens = min(p.burst, b.tokens+1)
	}
}

// wait blocks until channel may take another post, or ctx ends.
func (p *pacer) wait(ctx context.Context, channel string) error {
	d := p.reserve(channel)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		p.cancel(channel)
		return context.Cause(ctx)
	}
}
