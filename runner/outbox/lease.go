package outbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/autocapture/autocapture/database"
	"go.uber.org/zap"
)

// A thread is delivered by one deliverer at a time: a lease on its
// autocapture_threads row (pump_owner, pump_until on the database's clock).
// The lease is the run's: runs.lease_timeout, renewed every
// runs.heartbeat_interval by the same heartbeat loop that renews the runs
// (runner/lifecycle's renewer calls RenewBeside), in one statement per process
// for all the threads its deliverers hold. A deliverer whose process dies is
// therefore replaced within lease_timeout + heartbeat_interval (the sweeper,
// on the reaper's tick, gives the thread a new job once the lease lapsed:
// Sweep), as its runs are, so a thread never falls silent for long after
// its run has moved on.
//
// A deliverer that loses its lease (its renewal found another owner, or
// could not be made within lease_timeout - heartbeat_interval) is stopped,
// as a run is, so two deliverers never send one thread's operations at once.

// errThreadLeaseLost stops a deliverer that no longer holds its thread.
var errThreadLeaseLost = errors.New("lost the thread's delivery lease")

// pumpHold is a thread a deliverer of this process holds.
type pumpHold struct {
	owner    string
	a        Args
	cancel   context.CancelCauseFunc
	watchdog *time.Timer
}

// pumpHolds are the threads this process's deliverers hold, by owner (one
// thread per delivery job). The zero value is empty and ready.
type pumpHolds struct {
	mu sync.Mutex
	m  map[string]*pumpHold
	// renewing: a renewal is under way (RenewBeside).
	renewing atomic.Bool
}

// hold registers the thread a's lease, just taken by owner, and arms its
// watchdog; cancel stops the deliverer.
func (s *Outbox) hold(a Args, owner string, cancel context.CancelCauseFunc) *pumpHold {
	margin := s.cfg.LeaseTimeout - s.cfg.HeartbeatInterval
	h := &pumpHold{owner: owner, a: a, cancel: cancel}
	h.watchdog = time.AfterFunc(margin, func() {
		s.log.Warn("Could not renew a thread's delivery lease in time; stopping its delivery.",
			zap.String("run", a.RunID), zap.String("sink", a.Sink))
		cancel(fmt.Errorf("%w: not renewed within %s", errThreadLeaseLost, margin))
	})
	p := &s.pumps
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]*pumpHold{}
	}
	p.m[owner] = h
	return h
}

// unhold forgets h (its deliverer ended; the lease is released or held for
// a snooze by then).
func (s *Outbox) unhold(h *pumpHold) {
	p := &s.pumps
	p.mu.Lock()
	defer p.mu.Unlock()
	h.watchdog.Stop() // under the lock: a renewal re-arms only a current hold
	if p.m[h.owner] == h {
		delete(p.m, h.owner)
	}
}

// list is every hold now.
func (p *pumpHolds) list() []*pumpHold {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*pumpHold, 0, len(p.m))
	for _, h := range p.m {
		out = append(out, h)
	}
	return out
}

// current says whether h is still held (its deliverer has not ended).
func (p *pumpHolds) current(h *pumpHold) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[h.owner] == h
}

// rearm resets h's watchdog to d if h is still held (its deliverer has not
// ended), and says whether it was.
func (p *pumpHolds) rearm(h *pumpHold, d time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m[h.owner] != h {
		return false
	}
	h.watchdog.Reset(d)
	return true
}

// RenewBeside renews the threads' leases beside the runs' (runner/lifecycle's renewer),
// not after them: on a slow store, waiting for one more statement would
// space the runs' renewals further apart and cost them their leases. One
// renewal at a time; the renewer's end waits for it.
func (s *Outbox) RenewBeside(ctx context.Context, done *sync.WaitGroup) {
	if len(s.pumps.list()) == 0 || !s.pumps.renewing.CompareAndSwap(false, true) {
		return
	}
	done.Add(1)
	go func() {
		defer done.Done()
		defer s.pumps.renewing.Store(false)
		s.renewPumps(ctx)
	}()
}

// renewPumps renews the leases of every thread this process's deliverers
// hold, in one statement (at most notifyWorkers threads: one per delivery
// job), and stops a deliverer whose lease another one took.
func (s *Outbox) renewPumps(ctx context.Context) {
	hs := s.pumps.list()
	if len(hs) == 0 {
		return
	}
	began := time.Now()
	pumps := make([]database.PumpLease, len(hs))
	for i, h := range hs {
		pumps[i] = database.PumpLease{RunID: h.a.RunID, Owner: h.owner}
	}
	s.cfg.BeatReady(ctx)
	rctx, cancel := context.WithTimeout(ctx, s.cfg.RenewTimeout())
	defer cancel()
	renewed, err := s.tables.Threads.RenewPumps(rctx, s.beat(), s.cfg.LeaseTimeout.Milliseconds(), pumps)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("Could not renew the delivery leases of this process's threads.", zap.Int("threads", len(hs)), zap.Error(err))
		}
		return // each deliverer's watchdog decides when it is too late
	}
	margin := s.cfg.LeaseTimeout - s.cfg.HeartbeatInterval
	for _, h := range hs {
		if renewed[h.owner] {
			s.pumps.rearm(h, margin-time.Since(began))
			continue
		}
		if s.pumps.current(h) { // still delivering (not ended while the renewal ran): stop it
			s.log.Warn("Lost a thread's delivery lease; stopping its delivery.", zap.String("run", h.a.RunID),
				zap.String("sink", h.a.Sink))
			h.cancel(fmt.Errorf("%w: another deliverer holds it", errThreadLeaseLost))
		}
	}
}

// takePump takes the thread's delivery lease for owner, on the database's
// clock; false when another live deliverer holds it (or the thread is gone).
func (s *Outbox) takePump(ctx context.Context, a Args, owner string) (bool, error) {
	took, err := s.tables.Threads.TakePump(ctx, s.db(), a.RunID, a.Sink, owner, s.cfg.LeaseTimeout.Milliseconds())
	if err != nil {
		return false, fmt.Errorf("runner: deliver %s/%s: lease: %w", a.RunID, a.Sink, err)
	}
	return took, nil
}

// renewPump renews owner's lease before an operation is sent (which counts
// as a renewal for its watchdog), and says errThreadLeaseLost when owner no
// longer holds it.
func (s *Outbox) renewPump(ctx context.Context, a Args, owner string) error {
	began := time.Now()
	held, err := s.tables.Threads.HoldPump(ctx, s.db(), a.RunID, a.Sink, owner, s.cfg.LeaseTimeout.Milliseconds())
	if err != nil {
		return fmt.Errorf("renew lease: %w", err)
	}
	if !held {
		return fmt.Errorf("renew lease: %w", errThreadLeaseLost)
	}
	p := &s.pumps
	p.mu.Lock()
	h := p.m[owner]
	p.mu.Unlock()
	if h != nil {
		p.rearm(h, s.cfg.LeaseTimeout-s.cfg.HeartbeatInterval-time.Since(began))
	}
	return nil
}

// holdPump extends owner's lease by d past now (a snooze for a rate limit or
// a retry's backoff, the job ended): nobody renews it meanwhile.
func (s *Outbox) holdPump(a Args, owner string, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.tables.Threads.HoldPump(ctx, s.db(), a.RunID, a.Sink, owner, d.Milliseconds()); err != nil {
		s.log.Warn("Could not hold a thread through its retry wait; another deliverer may take it when its lease ends.",
			zap.String("run", a.RunID), zap.Error(err))
	}
}

// releasePump gives the thread back; a new operation's job takes it at once.
func (s *Outbox) releasePump(a Args, owner string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.tables.Threads.ReleasePump(ctx, s.db(), a.RunID, a.Sink, owner); err != nil {
		s.log.Warn("Could not release a thread; another deliverer takes it when its lease ends.",
			zap.String("run", a.RunID), zap.Error(err))
	}
}
