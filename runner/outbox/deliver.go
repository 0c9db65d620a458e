package outbox

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/riverqueue/river"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/notify"
)

// Queue is the River queue thread operations are delivered from.
const Queue = "autocapture_notify"

// A deliverer holds its thread under the run lease (runs.lease_timeout,
// renewed on the heartbeat): lease.go.
const (
	// opTimeout bounds one call to a notifier.
	opTimeout = 30 * time.Second
	// pumpBatch is how many operations one delivery job sends before it
	// hands the thread to a fresh job (bounding the job's run time).
	pumpBatch = 20
	// Workers is how many threads one process delivers at once. A
	// deliverer mostly waits (for the notifier's pace, a rate limit), so
	// this is high: with few, a storm's new threads wait for a free worker
	// behind other threads' replies however the notifier orders its posts.
	Workers = 32
	// notifyMaxAttempts bounds River's retries of one delivery job; operations
	// still pending after that are picked up again by the sweeper (Sweep).
	notifyMaxAttempts = 10
)

// Args is the job that delivers a run's pending thread operations to
// one sink. It is not unique: every recorded operation enqueues one, and a job
// that finds the thread held by another deliverer ends (that one delivers it).
type Args struct {
	RunID string `json:"run_id"`
	Sink  string `json:"sink"`
}

// Kind names the job kind in River's table.
func (Args) Kind() string { return "autocapture_notify" }

// InsertOpts puts deliveries on their own queue, so a slow notifier never
// holds a run's worker.
func (Args) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: Queue, MaxAttempts: notifyMaxAttempts}
}

// worker hands delivery jobs to the Outbox.
type worker struct {
	river.WorkerDefaults[Args]
	s *Outbox
}

// Timeout bounds one job: a batch of operations, each under opTimeout.
func (w *worker) Timeout(*river.Job[Args]) time.Duration {
	return pumpBatch*opTimeout + time.Minute
}

// NextRetry backs off 1 s, 2 s, 4 s … up to 2 minutes.
func (w *worker) NextRetry(job *river.Job[Args]) time.Time {
	return time.Now().Add(min(time.Second<<min(job.Attempt, 7), 2*time.Minute))
}

// Work delivers the run's pending operations for the job's sink.
func (w *worker) Work(ctx context.Context, job *river.Job[Args]) error {
	return w.s.Pump(ctx, job.Args, "job/"+strconv.FormatInt(job.ID, 10))
}

// pendingOp is an operation not yet delivered: its row's number, key and
// attempts, and the operation it decodes to.
type pendingOp struct {
	seq      int
	key      string
	op       Op
	attempts int
}

// Pump delivers the run's pending operations to one sink, in order, while it
// holds the thread's lease. A rate limit snoozes the job (the lease held until
// then, so other jobs wait); another error fails the job, which River retries
// with backoff, releasing the lease.
func (s *Outbox) Pump(ctx context.Context, a Args, owner string) error {
	n, ok := s.sinks[a.Sink]
	if !ok {
		s.log.Warn("Thread operations wait for a notifier this process does not have.", zap.String("sink", a.Sink),
			zap.String("run", a.RunID))
		return nil
	}
	taken, err := s.takePump(ctx, a, owner)
	if err != nil {
		return err
	}
	if !taken {
		// Another deliverer holds the thread: it delivers until the outbox is
		// empty, so this job's operation goes with it. If that deliverer read
		// the outbox before this operation committed, or dies, the sweeper
		// gives the thread a new job (Sweep: pending > 3 s, lease free).
		// Snoozing instead kept one job per recorded operation waking every
		// few seconds: in a 200-alert storm ~600 jobs for one thread, whose
		// fetches and snoozes (writes on SQLite) slowed deliveries ~3x.
		return nil
	}
	// The heartbeat renews the lease while this job delivers; losing it
	// stops the job (lease.go).
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	h := s.hold(a, owner, stop)
	keep := false
	defer func() {
		s.unhold(h)
		if !keep {
			s.releasePump(a, owner)
		}
	}()
	thread, err := s.threadOf(ctx, a) // read once; the parent's delivery sets it
	if err != nil {
		return err
	}
	for delivered := 0; ; delivered++ {
		if delivered == pumpBatch {
			// Within the job's timeout; the thread is handed on to a fresh job.
			return river.JobSnooze(0)
		}
		ops, err := s.pendingOps(ctx, a)
		if err != nil || len(ops) == 0 {
			return err
		}
		{ // the first only: the order is read again after each delivery
			if c := coalesced(ops); len(c) > 0 { // a later edit of the group's parent shows their change
				if err := s.markCoalesced(ctx, a, c); err != nil {
					return err
				}
				s.m.delivered.WithLabelValues(a.Sink, "coalesced").Add(float64(len(c)))
				continue
			}
			o := ops[0]
			err := s.deliverBeside(ctx, n, a, o, owner, &thread)
			if err == nil {
				s.m.delivered.WithLabelValues(a.Sink, string(o.op.kind())).Inc()
				continue
			}
			if lost := context.Cause(ctx); errors.Is(err, errThreadLeaseLost) || errors.Is(lost, errThreadLeaseLost) {
				// Another deliverer has the thread (or will, the lease
				// lapsing): the operation, counted as attempted, is its to
				// send as uncertain.
				s.log.Info("A deliverer stopped: its thread's lease is lost.", zap.String("run", a.RunID),
					zap.String("sink", a.Sink), zap.String("op", o.key), zap.NamedError("cause", cmp.Or(lost, err)))
				return nil
			}
			// Wait with the thread held, so neither this job nor the
			// sweeper's hammer a notifier that is down or limits us; a
			// deliverer that dies meanwhile is replaced when the hold ends.
			var rl *notify.RateLimitedError
			var later NotYetError
			var wait time.Duration
			switch {
			case errors.As(err, &later):
				wait = later.Wait
			case errors.As(err, &rl):
				wait = rl.RetryAfter
				s.m.failed.WithLabelValues(a.Sink, "rate_limited").Inc()
			default:
				wait = retryBackoff(o.attempts + 1)
				s.m.failed.WithLabelValues(a.Sink, "error").Inc()
				s.log.Warn("A thread operation was not delivered; it is retried.", zap.String("run", a.RunID),
					zap.String("sink", a.Sink), zap.String("op", o.key), zap.Int("attempt", o.attempts+1),
					zap.Duration("retry_in", wait), zap.Error(err))
			}
			keep = true
			s.holdPump(a, owner, wait+s.cfg.LeaseTimeout)
			return river.JobSnooze(wait)
		}
	}
}

// riverSchedulerInterval is River's job scheduler interval
// (maintenance.JobSchedulerIntervalDefault): a job snoozed for longer waits
// in state scheduled until the elected leader's scheduler makes it
// available, up to this much later, and longer while leadership moves after
// the leader died; a shorter snooze is available to any replica when due.
const riverSchedulerInterval = 5 * time.Second

// retryBackoff is the wait before attempt n+1 of an operation that failed n
// times: 1 s, 2 s, 4 s, then 5 s until it has waited about half a minute (8
// failures), then doubling to at most 5 minutes. The first waits stay within
// riverSchedulerInterval: doubling past it (then waiting for the scheduler's
// pass) would make a short Slack outage a thread many seconds late. A notifier down for longer is still tried ever more rarely.
func retryBackoff(n int) time.Duration {
	switch {
	case n <= 3:
		return time.Second << max(n-1, 0)
	case n <= 8:
		return riverSchedulerInterval
	}
	return min(riverSchedulerInterval<<min(n-8, 7), 5*time.Minute)
}

// pendingOps reads the next undelivered operations of the thread: in order,
// except that the run's verdict edit of its parent goes right after the
// parent itself, ahead of replies still waiting for the channel's pace. The
// parent is what the on-call reads first; the edit reads the run's state at
// delivery, so sending it early shows nothing out of date, and it is a
// chat.update, which Slack does not hold to the 1 post/s a channel allows.
// The loop delivers the first and reads again, so a verdict recorded while a
// thread's replies queue overtakes them; the rest of the batch is there for
// coalescing. A group's edits keep their order: 200 members' edits coalesce
// between their replies (a handful of edits), where put first they would
// cost one re-render of the whole group per reply.
//
// Two index reads, not one ORDER BY CASE: that sorts every pending
// operation of the thread on each read (hundreds in a storm's thread; with
// it a 200-alert storm's deliveries ran ~3x slower under the race detector).
func (s *Outbox) pendingOps(ctx context.Context, a Args) ([]pendingOp, error) {
	ops, err := s.readOps(ctx, a, func(q database.RowsQuerier) ([]database.OutboxOp, error) {
		return s.tables.Outbox.Pending(ctx, q, a.RunID, a.Sink, pumpBatch)
	})
	if err != nil || len(ops) == 0 {
		return ops, err
	}
	switch ops[0].op.(type) {
	case Open, VerdictEdit:
		return ops, nil
	}
	v, err := s.pendingVerdict(ctx, a)
	if err != nil || v == nil {
		return ops, err
	}
	out := append(make([]pendingOp, 0, len(ops)+1), *v)
	for _, o := range ops {
		if o.seq != v.seq {
			out = append(out, o)
		}
	}
	return out, nil
}

// pendingVerdict is the thread's first verdict edit (preliminary or
// refined) when one waits (lookups on the (run, sink, key) index), else nil.
func (s *Outbox) pendingVerdict(ctx context.Context, a Args) (*pendingOp, error) {
	ops, err := s.readOps(ctx, a, func(q database.RowsQuerier) ([]database.OutboxOp, error) {
		return s.tables.Outbox.PendingOfKeys(ctx, q, a.RunID, a.Sink, notify.KeyCloseVerdictPreliminary, notify.KeyCloseVerdict)
	})
	if err != nil || len(ops) == 0 {
		return nil, err
	}
	return &ops[0], nil
}

// readOps reads the thread's undelivered operations through read.
func (s *Outbox) readOps(ctx context.Context, a Args, read func(database.RowsQuerier) ([]database.OutboxOp, error)) ([]pendingOp, error) {
	rows, err := read(s.db())
	if err != nil {
		return nil, fmt.Errorf("runner: deliver %s/%s: read: %w", a.RunID, a.Sink, err)
	}
	var ops []pendingOp
	for _, r := range rows {
		o, err := decodeOp(opKind(r.Op), r.Key, r.Ref)
		if err != nil {
			o = badOp{k: opKind(r.Op), row: r.Key, raw: r.Ref, err: err}
		}
		ops = append(ops, pendingOp{seq: r.Seq, key: r.Key, op: o, attempts: r.Attempts})
	}
	return ops, nil
}

// editPoll is how often a deliverer whose reply waits for the channel's pace
// looks for a parent edit to send beside it.
const editPoll = 250 * time.Millisecond

// deliverBeside delivers o. While o is a step's reply — which in a busy
// channel waits seconds for the pace inside the notifier, the thread held —
// the verdict's edit of the parent recorded meanwhile is delivered beside it
// instead of after it: webhook -> verdict in the parent then costs the run's
// triage, not the channel's queue. Edits stay one at a time (this
// goroutine sends them, and the loop sends the next operation only when both
// are done), so the parent never shows an older state after a newer one. An
// edit that fails here is left pending for the loop, in order.
func (s *Outbox) deliverBeside(ctx context.Context, n notify.Notifier, a Args, o pendingOp, owner string, thread *notify.Thread) error {
	if o.op.kind() != opReply || thread.TS == "" { // a group's member replies carry no verdict edit of their own
		return s.deliver(ctx, n, a, o, owner, thread)
	}
	done := make(chan error, 1)
	th := *thread // the parent is delivered: a reply never changes the thread
	go func() { done <- s.deliver(ctx, n, a, o, owner, &th) }()
	tick := time.NewTicker(editPoll)
	defer tick.Stop()
	failed := false
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
			if failed {
				continue
			}
			v, err := s.pendingVerdict(ctx, a)
			if err != nil || v == nil {
				continue
			}
			e := *v
			th2 := *thread
			if err := s.deliver(ctx, n, a, e, owner, &th2); err != nil {
				failed = true
				continue
			}
			s.m.delivered.WithLabelValues(a.Sink, string(e.op.kind())).Inc()
		}
	}
}

// deliver sends one operation. What it says is read first, from the run's
// state now: an operation that cannot say it yet (a resume's reply before a
// replica claimed the run) waits without counting an attempt. The attempt is
// counted (and the lease renewed, which proves this deliverer still holds
// the thread) BEFORE the call: a kill -9 during the call leaves the
// operation pending with its attempt counted, so the next deliverer passes
// Retry and the notifier looks for what this one may have posted. After the
// call, the delivery mark and (for the parent) the thread's address commit
// together: a kill -9 before that commit is the same uncertain case.
//
// thread is the thread's address, set here when the parent is delivered.
func (s *Outbox) deliver(ctx context.Context, n notify.Notifier, a Args, o pendingOp, owner string, thread *notify.Thread) error {
	var act ActionContent
	if s.cfg.Actions != nil {
		act = s.cfg.Actions()
	}
	send, err := o.op.prepare(ctx, delivery{src: s.cfg.Content, actions: act, n: n, runID: a.RunID, key: o.key, retry: o.attempts > 0, thread: *thread})
	if err != nil {
		return err
	}
	if err := s.tables.Outbox.Attempt(ctx, s.db(), a.RunID, a.Sink, o.seq); err != nil {
		return fmt.Errorf("count attempt: %w", err)
	}
	if err := s.renewPump(ctx, a, owner); err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	opened, err := send(cctx)
	if err != nil {
		return s.noteFailure(a, o, err)
	}
	if err := s.markDelivered(ctx, a, o, opened); err != nil {
		return err
	}
	if opened != nil {
		*thread = *opened
	}
	return nil
}

// noteFailure records why an operation failed (for the API and the log) and
// returns err.
func (s *Outbox) noteFailure(a Args, o pendingOp, err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = s.tables.Outbox.Failed(ctx, s.db(), a.RunID, a.Sink, o.seq, err.Error())
	return err
}

// markCoalesced records edits left to a later one as delivered, in one statement.
func (s *Outbox) markCoalesced(ctx context.Context, a Args, ops []pendingOp) error {
	seqs := make([]int, len(ops))
	for i, o := range ops {
		seqs[i] = o.seq
	}
	if err := s.tables.Outbox.MarkCoalesced(ctx, s.db(), a.RunID, a.Sink, seqs); err != nil {
		return fmt.Errorf("mark coalesced: %w", err)
	}
	return nil
}

// markDelivered records the delivery, and for the parent the thread's address.
func (s *Outbox) markDelivered(ctx context.Context, a Args, o pendingOp, opened *notify.Thread) error {
	tx, err := s.db().BeginTx(context.WithoutCancel(ctx), nil)
	if err != nil {
		return fmt.Errorf("mark delivered: %w", err)
	}
	defer tx.Rollback()
	if opened != nil {
		b, _ := json.Marshal(opened)
		if err := s.tables.Threads.SetAddress(ctx, tx, a.RunID, a.Sink, string(b)); err != nil {
			return fmt.Errorf("save thread: %w", err)
		}
	}
	if err := s.tables.Outbox.MarkDelivered(ctx, tx, a.RunID, a.Sink, o.seq); err != nil {
		return fmt.Errorf("mark delivered: %w", err)
	}
	return tx.Commit()
}

// threadOf is the thread's address once its parent was delivered.
func (s *Outbox) threadOf(ctx context.Context, a Args) (notify.Thread, error) {
	raw, err := s.tables.Threads.Address(ctx, s.db(), a.RunID, a.Sink)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return notify.Thread{}, fmt.Errorf("read thread: %w", err)
	}
	var t notify.Thread
	if raw.Valid && raw.String != "" {
		if err := json.Unmarshal([]byte(raw.String), &t); err != nil {
			return t, fmt.Errorf("decode thread: %w", err)
		}
	}
	return t, nil
}

// coalesced are the edits of the group's parent at the head of ops that a
// later edit in ops makes redundant: any edit reads the whole group at
// delivery, so of several edits pending together only the last is sent
// (200 members' verdicts, ends and resolutions cost a handful of edits, not
// 600). Only the head's: an edit behind a member's reply keeps its place, so
// the parent never runs ahead of the replies it counts by more than a batch.
// The head is marked in one statement (markCoalesced): marked one at a time,
// each with a read of the outbox, a storm's thread would spend most of its
// time marking.
func coalesced(ops []pendingOp) []pendingOp {
	k := 0
	for k < len(ops) && isGroupEdit(ops[k]) {
		k++
	}
	if k == 0 {
		return nil
	}
	for _, o := range ops[k:] {
		if isGroupEdit(o) {
			return ops[:k]
		}
	}
	return ops[:k-1]
}

func isGroupEdit(o pendingOp) bool {
	_, ok := o.op.(GroupEdit)
	return ok
}
