package profiling

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/vocab"
)

// The profile guard (vocab.ProfileGuard) on the run store: one row per
// target in autocapture_profile_leases while a capture holds it, taken in a
// transaction that reads the pause, the budget and the cooldown and writes the
// row. On PostgreSQL the transaction first takes a fleet-wide advisory lock,
// so two replicas' Acquires run one after the other (the budget counts rows of
// other targets, which no row lock covers); on SQLite BEGIN IMMEDIATE holds
// the database. Every time is the database's ({now}).
//
// A row is "takeable" by another step only when its owner is gone
// (lease_until passed) and no recording can be running: held (start never
// sent) or stopped (the server answered the stop). A recording, stopping or
// stop_failed row keeps the target until the owner or the sweeper
// (sweep.go) gets a stop answered, or an operator clears it.
//
// A recording's lease_until never passes its deadline + stopGrace
// (lease.go): past that the sweeper may claim it, and the owner, its
// token gone, sends no stop of its own. A start that began no recording ends
// its lease with NotStarted (its start still counted). A recording the
// sweeper stopped stays, stopped with no owner, for profiling.collect_window:
// the same run's resumed step gets it back (resumeLease) and collects; any
// other run is refused busy; it spends no max_concurrent. A resumed step that
// comes while the sweeper is still stopping its recording waits for that stop
// (wait.go), then collects the same way. A resumed step
// whose start was counted but whose lease is gone is refused "recorded"
// (recordedBefore): never a second frame for one run's step.

// defaultProfileHold is a lease's hold when the request names none.
const defaultProfileHold = 30 * time.Second

// sweeperOwner prefixes the owner of a lease the sweeper has claimed to stop.
const sweeperOwner = "sweeper "

// ErrLeaseLost: the lease is no longer this holder's: the sweeper or a
// resumed attempt took the target over, or an operator cleared it.
var ErrLeaseLost = fmt.Errorf("runner: %w", vocab.ErrLeaseLost)

// The Plane is the fleet-wide guard over framed profiles, for Env.Profiles.
var _ vocab.ProfileGuard = (*Plane)(nil)

// normTarget is the key a target is leased by: its base URL without a
// trailing slash.
func normTarget(t string) string { return strings.TrimRight(strings.TrimSpace(t), "/") }

// Acquire takes req.Target's lease, gives a resumed step its own lease back,
// or refuses with a *vocab.ProfileRefusal. A resumed step whose earlier
// recording the sweeper is stopping right now waits for that stop (awaitSweep).
func (pl *Plane) Acquire(ctx context.Context, req vocab.LeaseRequest) (vocab.ProfileLease, error) {
	req.Target = normTarget(req.Target)
	if req.Target == "" || req.RunID == "" || req.StepID == "" {
		return nil, fmt.Errorf("runner: profile lease: target, run and step are required")
	}
	hold := req.Hold
	if hold <= 0 {
		hold = defaultProfileHold
	}
	var wait *sweepWait
	for {
		l, err := pl.acquireOnce(ctx, req, hold)
		if retry := sweepingOrMoved(err); retry != nil {
			if wait == nil {
				wait = pl.newSweepWait(req)
			}
			if err := wait.next(ctx, retry); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		wait.done(l)
		pl.log.Info("Took a profile lease.", zap.String("run", req.RunID), zap.String("step", req.StepID),
			zap.String("target", req.Target), zap.Bool("resumed", l.resumed != nil))
		pl.trackLease(l)
		return l, nil
	}
}

// acquireOnce is one try of Acquire: one transaction.
func (pl *Plane) acquireOnce(ctx context.Context, req vocab.LeaseRequest, hold time.Duration) (*profileLease, error) {
	tx, err := pl.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("runner: profile lease %s: %w", req.Target, err)
	}
	defer tx.Rollback()
	if err := pl.tables.ProfileLeases.LockAcquire(ctx, tx); err != nil { // PostgreSQL only
		return nil, fmt.Errorf("runner: profile lease %s: lock: %w", req.Target, err)
	}
	l, err := pl.acquireTx(ctx, tx, req, hold)
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("runner: profile lease %s: commit: %w", req.Target, err)
	}
	return l, nil
}

// acquireTx decides and writes inside Acquire's transaction.
func (pl *Plane) acquireTx(ctx context.Context, tx *sql.Tx, req vocab.LeaseRequest, hold time.Duration) (*profileLease, error) {
	now, err := pl.dbNow(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("runner: profile lease %s: clock: %w", req.Target, err)
	}
	cur, err := leaseOf(pl.tables.ProfileLeases.Get(ctx, tx, req.Target))
	if errors.Is(err, sql.ErrNoRows) {
		cur = nil
	} else if err != nil {
		return nil, fmt.Errorf("runner: profile lease %s: %w", req.Target, err)
	}
	l := &profileLease{pl: pl, target: req.Target, runID: req.RunID, plan: req.Plan, step: req.StepID,
		token: uuid.NewString(), stop: make(chan struct{}), done: make(chan struct{})}
	if cur != nil && cur.sameStep(req) {
		return l, pl.resumeLease(ctx, tx, l, cur, now, hold)
	}
	if refusal, err := pl.recordedBefore(ctx, tx, req); err != nil || refusal != nil {
		if err != nil {
			return nil, err
		}
		return nil, refusal
	}
	if cur != nil && !cur.takeable(now) {
		return nil, &vocab.ProfileRefusal{Reason: vocab.RefusedBusy, Detail: cur.busyDetail()}
	}
	if refusal, err := pl.profileBudget(ctx, tx, req, now); err != nil || refusal != nil {
		if err != nil {
			return nil, err
		}
		return nil, refusal
	}
	if cur != nil { // its owner is gone and nothing records: the target is free
		if err := pl.tables.ProfileLeases.Delete(ctx, tx, cur.target, cur.token); err != nil {
			return nil, fmt.Errorf("runner: profile lease %s: %w", req.Target, err)
		}
		if err := pl.profileEvent(ctx, tx, cur.runID, cur.target, l.runID, "released",
			"taken over by run "+req.RunID+": the lease ("+cur.state+") expired"); err != nil {
			return nil, err
		}
	}
	if err := pl.tables.ProfileLeases.Insert(ctx, tx, database.ProfileLease{Target: req.Target, RunID: req.RunID,
		Plan: req.Plan, Step: req.StepID, Owner: pl.id, Token: l.token, State: vocab.LeaseHeld,
		Acquired: now, Until: now + hold.Milliseconds()}); err != nil {
		return nil, fmt.Errorf("runner: profile lease %s: %w", req.Target, err)
	}
	return l, pl.profileEvent(ctx, tx, req.RunID, req.Target, pl.id, "acquired", "")
}

// resumeLease gives a resumed step its lease back under a new token (the
// earlier attempt, were it still alive, can change nothing more). A lease the
// sweeper is stopping right now stays the sweeper's: *sweepingError, and
// Acquire waits for the stop's answer. A recording the sweeper stopped comes
// back saying so (Recording.StoppedBy, StoppedAt).
func (pl *Plane) resumeLease(ctx context.Context, tx *sql.Tx, l *profileLease, cur *leaseRow, now int64, hold time.Duration) error {
	if strings.HasPrefix(cur.owner, sweeperOwner) && cur.until >= now {
		return &sweepingError{target: cur.target, owner: cur.owner, until: cur.until}
	}
	// Guarded by the token as read: a sweep on another replica may have
	// claimed or released the row since (PostgreSQL reads committed rows;
	// the sweeper takes no advisory lock). Then Acquire reads it again.
	took, err := pl.tables.ProfileLeases.Resume(ctx, tx, cur.target, cur.token, pl.id, l.token, now+hold.Milliseconds())
	if err != nil {
		return fmt.Errorf("runner: profile lease %s: resume: %w", cur.target, err)
	}
	if !took {
		return errLeaseMoved
	}
	if cur.state != vocab.LeaseHeld { // start_profile may have been sent: stop first
		rec := cur.recording()
		if cur.swept() {
			if err := pl.sweptStop(ctx, tx, cur, &rec); err != nil {
				return err
			}
		}
		l.resumed = &rec
	}
	if cur.stopAt.Valid {
		l.requestStop(cur.stopBy)
	}
	return pl.profileEvent(ctx, tx, l.runID, l.target, pl.id, "resumed", "state "+cur.state)
}

// recordedBefore refuses a resumed attempt of a step that already started a
// frame on the target (its start is counted) but whose lease is gone: the
// sweeper stopped the frame and its collect window passed (or the run's
// earlier attempt ended the lease). A fresh start would be a second frame on a
// server that already paged. The refusal says what became of the first frame:
// Lost when its stop was answered and the target was then released by the
// sweeper or cleared by an operator before anyone collected it (the files are
// on the server; the step fails, saying so), a skip otherwise (the earlier
// attempt collected it, or no recording began).
func (pl *Plane) recordedBefore(ctx context.Context, tx *sql.Tx, req vocab.LeaseRequest) (*vocab.ProfileRefusal, error) {
	started, err := pl.tables.ProfileStarts.LastOf(ctx, tx, req.RunID, req.Plan, req.StepID, req.Target)
	if err != nil {
		return nil, fmt.Errorf("runner: profile lease %s: earlier starts: %w", req.Target, err)
	}
	if !started.Valid {
		return nil, nil
	}
	swept, stopped, err := pl.tables.ProfileEvents.Stops(ctx, tx, req.RunID, req.Target)
	if err != nil {
		return nil, fmt.Errorf("runner: profile lease %s: earlier events: %w", req.Target, err)
	}
	ended, by, why, err := pl.tables.ProfileEvents.LastEnd(ctx, tx, req.RunID, req.Target)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("runner: profile lease %s: earlier events: %w", req.Target, err)
	}
	lost := stopped > 0 && (ended == "cleared" || (ended == "released" && strings.HasPrefix(by, sweeperOwner)))
	what := "its lease has ended since"
	switch {
	case lost && swept > 0:
		what = "the sweeper stopped that frame after its owner died, and its files were left on the server (not collected)"
	case lost && ended == "cleared":
		what = "its stop was answered, and " + by + " cleared the target before its files were collected (left on the server)"
	case lost:
		what = "its stop was answered, and the sweeper released the target before its files were collected (left on the server): " + why
	case ended == "not_started":
		what = "no recording began (" + why + ")"
	case ended == "released" && stopped > 0:
		what = "an earlier attempt collected its files and released the target"
	}
	return &vocab.ProfileRefusal{Reason: vocab.RefusedRecorded, Lost: lost, Detail: fmt.Sprintf(
		"an earlier attempt of run %s's step %s started a frame on %s at %s; %s: no second start",
		req.RunID, req.StepID, req.Target, fmtMS(started.Int64), what)}, nil
}

// profileBudget refuses a new lease when profiling is paused, the fleet's
// budget is used up, or the target's cooldown has not passed; nil when it
// may be taken.
func (pl *Plane) profileBudget(ctx context.Context, tx *sql.Tx, req vocab.LeaseRequest, now int64) (*vocab.ProfileRefusal, error) {
	p, err := pl.readPause(ctx, tx)
	if err != nil {
		return nil, err
	}
	if p.paused {
		return &vocab.ProfileRefusal{Reason: vocab.RefusedPaused, Detail: p.detail()}, nil
	}
	cfg := pl.cfg
	active, pending, err := pl.activeLeases(ctx, tx, now)
	if err != nil {
		return nil, err
	}
	if active >= cfg.MaxConcurrent {
		return &vocab.ProfileRefusal{Reason: vocab.RefusedBudget,
			Detail: fmt.Sprintf("%d of profiling.max_concurrent %d captures hold a target", active, cfg.MaxConcurrent)}, nil
	}
	started, err := pl.tables.ProfileStarts.Since(ctx, tx, now-time.Hour.Milliseconds())
	if err != nil {
		return nil, fmt.Errorf("runner: profile budget: %w", err)
	}
	if started+pending >= cfg.MaxPerHour {
		detail := fmt.Sprintf("%d captures started in the last hour and %d about to: profiling.max_per_hour is %d",
			started, pending, cfg.MaxPerHour)
		first, err := pl.tables.ProfileStarts.OldestSince(ctx, tx, now-time.Hour.Milliseconds())
		if err != nil {
			return nil, fmt.Errorf("runner: profile budget: %w", err)
		}
		if first.Valid && pending == 0 { // a start about to be recorded may take the slot first
			detail += "; next slot from " + fmtMS(first.Int64+time.Hour.Milliseconds())
		}
		return &vocab.ProfileRefusal{Reason: vocab.RefusedBudget, Detail: detail}, nil
	}
	if req.Cooldown <= 0 {
		return nil, nil
	}
	last, err := pl.tables.ProfileStarts.LastOn(ctx, tx, req.Target)
	if err != nil {
		return nil, fmt.Errorf("runner: profile cooldown: %w", err)
	}
	if last.Valid && now-last.Int64 < req.Cooldown.Milliseconds() {
		return &vocab.ProfileRefusal{Reason: vocab.RefusedCooldown,
			Detail: fmt.Sprintf("%s was profiled at %s, cooldown %s: next from %s", req.Target, fmtMS(last.Int64),
				req.Cooldown, fmtMS(last.Int64+req.Cooldown.Milliseconds()))}, nil
	}
	return nil, nil
}

// activeLeases counts the leases that hold a target (every row but the
// takeable ones and the swept ones: a recording the sweeper stopped waits,
// ownerless, for its run's resumed attempt to collect its files; it holds its
// own target but records and flushes nothing, so it spends no
// max_concurrent) and, of those, the ones not started yet (they count against
// max_per_hour before their start is recorded).
func (pl *Plane) activeLeases(ctx context.Context, q database.Querier, now int64) (active, pending int, err error) {
	active, pending, err = pl.tables.ProfileLeases.Active(ctx, q, vocab.LeaseHeld, vocab.LeaseStopped, now)
	if err != nil {
		return 0, 0, fmt.Errorf("runner: profile budget: %w", err)
	}
	return active, pending, nil
}

// fmtMS formats a database time for a person.
func fmtMS(ms int64) string { return fromMS(ms).Format("2006-01-02T15:04:05.000Z07:00") }

// Baseline returns the report kept for key: the last one kept with
// baseline=true, else the last one; nil, nil when none is kept.
func (pl *Plane) Baseline(ctx context.Context, key string) (*vocab.KeptReport, error) {
	kept, err := pl.tables.ProfileReports.Baseline(ctx, pl.db, key)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("runner: profile baseline %q: %w", key, err)
	}
	return &vocab.KeptReport{RunID: kept.RunID, Target: kept.Target, Baseline: kept.Baseline,
		TakenAt: fromMS(kept.TakenAt.Int64), Report: []byte(kept.Report)}, nil
}

// KeepReport stores a capture's analysis under key; the same run's report
// for the same key is replaced (a resumed step keeps it again).
func (pl *Plane) KeepReport(ctx context.Context, key string, r vocab.KeptReport) error {
	if key == "" || r.RunID == "" || len(r.Report) == 0 {
		return fmt.Errorf("runner: keep profile report: key, run and report are required")
	}
	var taken sql.NullInt64
	if !r.TakenAt.IsZero() {
		taken = sql.NullInt64{Int64: toMS(r.TakenAt), Valid: true}
	}
	err := pl.tables.ProfileReports.Put(ctx, pl.db, database.ProfileReport{Key: key, RunID: r.RunID,
		Target: normTarget(r.Target), Baseline: r.Baseline, TakenAt: taken, Report: string(r.Report)})
	if err != nil {
		return fmt.Errorf("runner: keep profile report %q: %w", key, err)
	}
	return nil
}
