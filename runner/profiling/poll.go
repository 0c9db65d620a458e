package profiling

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"
)

// profileLocal is this process's live profile leases, by token: a stop
// request made on this replica reaches them at once, and each is polled for a
// request made on another replica (the flag on its row).
// It also counts the sweeper's stops in flight, which Close waits for.
type profileLocal struct {
	mu     sync.Mutex
	leases map[string]*profileLease
	closed bool
	stops  sync.WaitGroup
}

// startStop counts one more stop in flight, unless the Plane is closing.
func (p *profileLocal) startStop() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.stops.Add(1)
	return true
}

// closeStops refuses new stops and waits for those in flight (the Plane's
// background context is cancelled first, which cuts them short).
func (p *profileLocal) closeStops() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.stops.Wait()
}

// maxStopPoll is the slowest a live lease is polled for an operator's stop.
const maxStopPoll = time.Second

// trackLease remembers l and polls its row until it ends here or the
// Plane stops.
func (pl *Plane) trackLease(l *profileLease) {
	pl.live.mu.Lock()
	if pl.live.leases == nil {
		pl.live.leases = map[string]*profileLease{}
	}
	pl.live.leases[l.token] = l
	pl.live.mu.Unlock()
	go pl.pollStop(l, min(maxStopPoll, pl.cfg.SweepInterval))
}

func (pl *Plane) untrackLease(l *profileLease) {
	pl.live.mu.Lock()
	delete(pl.live.leases, l.token)
	pl.live.mu.Unlock()
}

// localStop closes the stop channel of this process's leases of runID at once
// (the request is on their rows too, for the other replicas).
func (pl *Plane) localStop(runID, by string) int {
	pl.live.mu.Lock()
	defer pl.live.mu.Unlock()
	n := 0
	for _, l := range pl.live.leases {
		if l.runID == runID {
			l.requestStop(by)
			n++
		}
	}
	return n
}

// pollStop reads l's stop flag every interval until a request is seen, the
// lease ends here or is lost, or the Plane's background work stops.
func (pl *Plane) pollStop(l *profileLease, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-pl.bg.Done():
			return
		case <-l.done:
			return
		case <-l.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(pl.bg, 5*time.Second)
		stopAt, stopBy, err := pl.tables.ProfileLeases.StopRequest(ctx, pl.db, l.target, l.token)
		cancel()
		switch {
		case errors.Is(err, sql.ErrNoRows): // released, taken over or cleared: nothing to watch
			l.end()
			return
		case err != nil:
			if pl.bg.Err() == nil {
				pl.log.Debug("Could not read a profile lease's stop flag; trying again.", zap.String("target", l.target), zap.Error(err))
			}
		case stopAt.Valid:
			l.requestStop(stopBy)
			return
		}
	}
}
