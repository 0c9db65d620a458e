package runner

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"go.uber.org/zap"
)

// reaper resumes abandoned runs: every heartbeat_interval it takes them with a
// compare-and-swap on the generation (so one process wins) and enqueues a
// fresh job in the same transaction. Abandoned is either of:
//   - expired: an owner held the run and stopped heartbeating (crash, lost store);
//   - stranded: the run is queued and nobody holds it, yet no River job of its
//     generation will ever start it: the job was fetched (state running) more
//     than lease_timeout ago and never claimed the run (the process died in
//     between), or it ended without claiming (discarded after store failures).
//     Runs waiting behind runs.max_concurrent (job available) or a playbook's
//     max_concurrent (job scheduled, or fetched moments ago) keep their job.
func (s *Service) reaper() {
	defer s.bgDone.Done()
	t := time.NewTicker(s.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		if n, err := s.reapOnce(s.bg); err != nil && s.bg.Err() == nil {
			s.log.Warn("Reaper could not scan for abandoned runs.", zap.Error(err))
		} else if n > 0 {
			s.log.Info("Resumed abandoned runs.", zap.Int("runs", n))
		}
		select {
		case <-s.bg.Done():
			return
		case <-t.C:
		}
	}
}

// outboxSweeper gives waiting thread operations and manifests whose writer
// died a new job, every heartbeat_interval, on its own loop: behind the
// reaper's, a tick that resumed a dead replica's runs (a transaction each,
// seconds on a loaded database) held back the threads that replica was
// delivering, and their runs' ends reached the thread seconds late.
func (s *Service) outboxSweeper() {
	defer s.bgDone.Done()
	t := time.NewTicker(s.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		if n, err := s.sweepOutbox(s.bg); err != nil && s.bg.Err() == nil {
			s.log.Warn("Could not sweep the notification outbox.", zap.Error(err))
		} else if n > 0 {
			s.log.Info("Gave waiting thread operations a new deliverer.", zap.Int("threads", n))
		}
		if n, err := s.sweepManifests(s.bg); err != nil && s.bg.Err() == nil {
			s.log.Warn("Could not sweep for orphaned manifest jobs.", zap.Error(err))
		} else if n > 0 {
			s.log.Info("Asked again for manifests whose writer died.", zap.Int("runs", n))
		}
		select {
		case <-s.bg.Done():
			return
		case <-t.C:
		}
	}
}

// reapKind is one way a run is abandoned.
type reapKind int

const (
	reapExpired reapKind = iota
	reapStranded
)

// liveJobStates are River job states that will still run the job, or (running)
// are running it now, if attempted within lease_timeout.
const liveJobStates = `('available', 'pending', 'retryable', 'scheduled', 'running')`

// abandoned returns the SQL condition on autocapture_runs (beside finished_at
// IS NULL) under which a run is abandoned in kind k, with its arguments,
// numbered from $first. Leases and queued_at are on the database's clock
// ({now}), never this process's: see nowMS.
func (s *Service) abandoned(k reapKind, first int) (string, []any) {
	if k == reapExpired {
		return `owner IS NOT NULL AND lease_until < {now}`, nil
	}
	lease := s.cfg.LeaseTimeout
	// River stamps attempted_at with the database's clock, in its own format.
	fresh := fmt.Sprintf(`datetime('now', 'subsec', $%d)`, first+2)
	var leaseArg any = fmt.Sprintf("-%.3f seconds", lease.Seconds())
	if s.dialect == dialectPostgres {
		fresh = fmt.Sprintf(`statement_timestamp() - make_interval(secs => $%d)`, first+2)
		leaseArg = lease.Seconds()
	}
	// The run's job of its current generation is river_job_id (enqueue writes
	// both in one transaction): one primary-key lookup per queued run.
	cond := fmt.Sprintf(`owner IS NULL AND status = $%d AND queued_at < {now} - $%d AND NOT EXISTS (
		SELECT 1 FROM river_job j WHERE j.id = autocapture_runs.river_job_id AND j.state IN %s
		AND (j.state <> 'running' OR j.attempted_at >= %s))`,
		first, first+1, liveJobStates, fresh)
	return cond, []any{StatusQueued, lease.Milliseconds(), leaseArg}
}

// reapOnce resumes the abandoned runs and returns how many.
func (s *Service) reapOnce(ctx context.Context) (int, error) {
	n := 0
	for _, k := range []reapKind{reapExpired, reapStranded} {
		cands, err := s.reapCandidates(ctx, k)
		if err != nil {
			return n, err
		}
		// Each replica in its own order: they take different runs at once.
		rand.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
		for _, c := range cands {
			won, err := s.resume(ctx, k, c)
			if err != nil {
				return n, err
			}
			if won {
				n++
				s.m.resumed.Inc()
			}
		}
	}
	return n, nil
}

// reapQuery selects up to 100 runs abandoned in kind k: every reaper tick on
// every replica runs it, so it reads an index (see migration 4).
func (s *Service) reapQuery(k reapKind) (string, []any) {
	cond, args := s.abandoned(k, 1)
	return s.dialect.sql(`SELECT id, generation, COALESCE(owner, '') FROM autocapture_runs
		WHERE finished_at IS NULL AND ` + cond + ` LIMIT 100`), args
}

type reapCand struct {
	id    string
	gen   int
	owner string // the owner whose lease expired; "" for a stranded run
}

// reapCandidates lists up to 100 runs abandoned in kind k.
func (s *Service) reapCandidates(ctx context.Context, k reapKind) ([]reapCand, error) {
	q, args := s.reapQuery(k)
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("runner: reaper: scan: %w", err)
	}
	defer rows.Close()
	var cands []reapCand
	for rows.Next() {
		var c reapCand
		if err := rows.Scan(&c.id, &c.gen, &c.owner); err != nil {
			return nil, fmt.Errorf("runner: reaper: scan: %w", err)
		}
		cands = append(cands, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("runner: reaper: scan: %w", err)
	}
	return cands, nil
}

// resume moves one abandoned run back to the queue with a new job, if it is
// still abandoned in kind k and held by the owner scanned (both re-checked in
// the update). Its thread reply, recorded in the same commit, carries that
// owner, so it can say which replica gave the run up and which one took it.
func (s *Service) resume(ctx context.Context, k reapKind, c reapCand) (bool, error) {
	id, gen := c.id, c.gen
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("runner: reaper: begin: %w", err)
	}
	defer tx.Rollback()
	cond, args := s.abandoned(k, 5)
	// The thread says so in the same commit: an attempt that dies before its
	// own record (recordResumed, then a no-op repeat), or a job lost before it
	// claims the run, must not leave the counter ahead of the thread.
	var resumed int
	// A run another replica's reaper is taking (its row locked) is skipped,
	// not waited for: every replica scans the same candidates, and waiting,
	// they took a dead replica's runs one at a time behind each other's
	// transactions (the chaos test under load: its 16 runs resumed over 12 s).
	err = tx.QueryRowContext(ctx, s.dialect.sql(`UPDATE autocapture_runs SET generation = generation + 1,
		resumed = resumed + 1, owner = NULL, lease_until = NULL, status = $1, queued_at = {now}
		WHERE `+s.dialect.unlockedRuns(`id = $2 AND generation = $3 AND COALESCE(owner, '') = $4 AND finished_at IS NULL AND `+cond)+`
		RETURNING resumed`), append([]any{StatusQueued, id, gen, c.owner}, args...)...).Scan(&resumed)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil // another process won or is taking it, the owner renewed, or the job started it
	case err != nil:
		return false, fmt.Errorf("runner: reaper: take run %s: %w", id, err)
	}
	// Who takes it over is not known yet: the claimer adds it to the ref
	// (recordResumed); a deliverer that comes first waits for it (replyFor).
	if err := s.recordOps(ctx, tx, id, op{kind: opReply, key: resumedKey(resumed), ref: resumedRef(resumed, c.owner, "")}); err != nil {
		return false, fmt.Errorf("runner: reaper: run %s: %w", id, err)
	}
	if err := s.enqueue(ctx, tx, []runArgs{{RunID: id, Generation: gen + 1}}); err != nil {
		return false, fmt.Errorf("runner: reaper: run %s: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("runner: reaper: commit run %s: %w", id, err)
	}
	if k == reapStranded {
		s.log.Info("Resuming a queued run whose job was lost before it claimed the run.", zap.String("run", id), zap.Int("generation", gen+1))
	} else {
		s.log.Info("Resuming a run whose owner stopped heartbeating.", zap.String("run", id), zap.Int("generation", gen+1),
			zap.String("from", c.owner))
	}
	return true, nil
}
