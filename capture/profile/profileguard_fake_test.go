package profile

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/autocapture/autocapture/vocab"
)

// eventLog is one ordered record of what the lease and the target saw, so a
// test can assert "recording was durable before start_profile".
type eventLog struct {
	mu     sync.Mutex
	events []string
	at     map[string]time.Time // when each event first happened
}

func (l *eventLog) add(e string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
	if l.at == nil {
		l.at = map[string]time.Time{}
	}
	if _, ok := l.at[e]; !ok {
		l.at[e] = time.Now()
	}
}

// when is when e first happened (zero if never).
func (l *eventLog) when(e string) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.at[e]
}

func (l *eventLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.events...)
}

func (l *eventLog) count(e string) int {
	n := 0
	for _, x := range l.all() {
		if x == e {
			n++
		}
	}
	return n
}

// index is the position of the first e, or -1.
func (l *eventLog) index(e string) int {
	for i, x := range l.all() {
		if x == e {
			return i
		}
	}
	return -1
}

// fakeGuard is an in-memory ProfileGuard that holds the step to the
// contract: one lease per target (a stop_failed one stays held), refusals,
// renewals only while held, recording or collecting (stopped),
// a resumed lease with its saved state, the transitions in order (a write out
// of order is an error, as the runner's store would refuse it), and Release
// only when start was never sent or the stop was answered.
type fakeGuard struct {
	log *eventLog

	mu sync.Mutex
	// refuse, when set, is every Acquire's answer.
	refuse *vocab.ProfileRefusal
	// resume, when set, is given back by the next Acquire as Resumed.
	resume *vocab.Recording
	leases map[string]*fakeLease
	kept   map[string][]vocab.KeptReport
	// violations lists contract breaches by the step.
	violations []string
	// collectRenewals counts renewals of stopped leases (while collecting).
	collectRenewals atomic.Int32
}

func newFakeGuard(log *eventLog) *fakeGuard {
	return &fakeGuard{log: log, leases: map[string]*fakeLease{}, kept: map[string][]vocab.KeptReport{}}
}

func (g *fakeGuard) violate(format string, args ...any) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	err := fmt.Errorf(format, args...)
	g.violations = append(g.violations, err.Error())
	return err
}

func (g *fakeGuard) Acquire(ctx context.Context, req vocab.LeaseRequest) (vocab.ProfileLease, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.log.add("lease:acquire")
	if g.refuse != nil {
		return nil, g.refuse
	}
	if l, ok := g.leases[req.Target]; ok && (g.resume == nil || l.req.RunID != req.RunID) {
		return nil, &vocab.ProfileRefusal{Reason: vocab.RefusedBusy, Detail: fmt.Sprintf("busy: run %s holds it (%s)", l.req.RunID, l.state)}
	}
	if req.Hold <= 0 {
		return nil, fmt.Errorf("fake guard: hold %v", req.Hold)
	}
	l := &fakeLease{g: g, req: req, state: vocab.LeaseHeld, stopReq: make(chan struct{})}
	if g.resume != nil {
		r := *g.resume
		l.resumed, l.state = &r, r.State
		g.resume = nil
	}
	g.leases[req.Target] = l
	return l, nil
}

func (g *fakeGuard) Baseline(ctx context.Context, key string) (*vocab.KeptReport, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ks := g.kept[key]
	for i := len(ks) - 1; i >= 0; i-- {
		if ks[i].Baseline {
			return &ks[i], nil
		}
	}
	if len(ks) > 0 {
		return &ks[len(ks)-1], nil
	}
	return nil, nil
}

func (g *fakeGuard) KeepReport(ctx context.Context, key string, r vocab.KeptReport) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.kept[key] = append(g.kept[key], r)
	return nil
}

// held returns the lease on target, if any.
func (g *fakeGuard) held(target string) *fakeLease {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.leases[target]
}

func (g *fakeGuard) contractViolations() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.violations...)
}

type fakeLease struct {
	g       *fakeGuard
	req     vocab.LeaseRequest
	resumed *vocab.Recording
	stopReq chan struct{}
	once    sync.Once

	mu         sync.Mutex
	state      string
	released   bool
	saved      json.RawMessage
	failReason string
	renewals   int
}

func (l *fakeLease) Resumed() *vocab.Recording { return l.resumed }

// move changes state from one of from to to, or records a violation.
func (l *fakeLease) move(event, to string, from ...string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return l.g.violate("%s after release", event)
	}
	for _, f := range from {
		if l.state == f {
			l.state = to
			l.g.log.add("lease:" + event)
			return nil
		}
	}
	return l.g.violate("%s in state %s (want one of %v)", event, l.state, from)
}

func (l *fakeLease) Recording(ctx context.Context, frame time.Duration, saved json.RawMessage) (vocab.Recording, error) {
	if err := l.move("recording", vocab.LeaseRecording, vocab.LeaseHeld); err != nil {
		return vocab.Recording{}, err
	}
	l.mu.Lock()
	l.saved = saved
	l.mu.Unlock()
	now := time.Now()
	return vocab.Recording{Target: l.req.Target, State: vocab.LeaseRecording, Since: now, Deadline: now.Add(frame), Saved: saved}, nil
}

func (l *fakeLease) Stopping(ctx context.Context, stopTimeout time.Duration) error {
	if stopTimeout <= 0 {
		return l.g.violate("stopping with stop timeout %v", stopTimeout)
	}
	return l.move("stopping", vocab.LeaseStopping, vocab.LeaseRecording, vocab.LeaseStopping)
}

func (l *fakeLease) Stopped(ctx context.Context) error {
	return l.move("stopped", vocab.LeaseStopped, vocab.LeaseStopping)
}

func (l *fakeLease) StopFailed(ctx context.Context, reason string) error {
	if err := l.move("stop_failed", vocab.LeaseStopFailed, vocab.LeaseStopping); err != nil {
		return err
	}
	l.mu.Lock()
	l.failReason = reason
	l.mu.Unlock()
	return nil
}

func (l *fakeLease) Renew(ctx context.Context, hold time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released || (l.state != vocab.LeaseHeld && l.state != vocab.LeaseRecording && l.state != vocab.LeaseStopped) {
		return l.g.violate("renew in state %s (released %v)", l.state, l.released)
	}
	l.renewals++
	if l.state == vocab.LeaseStopped {
		l.g.collectRenewals.Add(1)
	}
	return nil
}

func (l *fakeLease) NotStarted(ctx context.Context, why string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return l.g.violate("not started after release")
	}
	if l.state != vocab.LeaseRecording || !l.noStart() {
		return l.g.violate("not started in state %s or after a start reached the server", l.state)
	}
	l.released = true
	l.g.log.add("lease:not_started")
	l.g.mu.Lock()
	delete(l.g.leases, l.req.Target)
	l.g.mu.Unlock()
	return nil
}

func (l *fakeLease) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return l.g.violate("release twice")
	}
	if l.state != vocab.LeaseHeld && l.state != vocab.LeaseStopped && !(l.state == vocab.LeaseRecording && l.noStart()) {
		return l.g.violate("release in state %s: only after an answered stop or when start was never sent", l.state)
	}
	l.released = true
	l.g.log.add("lease:release")
	l.g.mu.Lock()
	delete(l.g.leases, l.req.Target)
	l.g.mu.Unlock()
	return nil
}

// noStart says no start_profile reached a target after this lease recorded
// (a refused or unarmed start).
func (l *fakeLease) noStart() bool {
	return l.g.log.count("http:start_profile 200") == 0
}

func (l *fakeLease) StopRequested() <-chan struct{} { return l.stopReq }

// requestStop is the operator's POST /api/v1/runs/{id}/stop-profile.
func (l *fakeLease) requestStop() { l.once.Do(func() { close(l.stopReq) }) }

func (l *fakeLease) snapshot() (state string, released bool, failReason string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state, l.released, l.failReason
}
