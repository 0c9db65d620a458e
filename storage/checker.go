package storage

import (
	"context"
	"time"
)

// Checker re-runs a store's health check on an interval for as long as the
// daemon runs, and reports the first result and each change (up → down,
// down → up), so a caller can keep a gauge and log one line per change
// instead of one a minute.
type Checker struct {
	// Check is the health check, e.g. (*S3).Check.
	Check func(context.Context) error
	// Interval between checks (default one minute).
	Interval time.Duration
	// Timeout bounds one check (default 10 s).
	Timeout time.Duration
	// Changed is called with the first result and then whenever the result
	// goes from nil to an error or back (nil: the store answers). An error
	// whose text changes while down is not a change.
	Changed func(err error)
}

// Run checks at once, then every Interval, until ctx ends.
func (c *Checker) Run(ctx context.Context) {
	interval, timeout := c.Interval, c.Timeout
	if interval <= 0 {
		interval = time.Minute
	}
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	first, wasUp := true, false
	for {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		err := c.Check(cctx)
		cancel()
		if ctx.Err() != nil {
			return // shutting down: a check cut short says nothing about the store
		}
		if up := err == nil; first || up != wasUp {
			c.Changed(err)
			first, wasUp = false, up
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
