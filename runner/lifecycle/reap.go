package lifecycle

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/runner/outbox"
	"github.com/autocapture/autocapture/vocab"
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
func (s *Runs) reaper() {
	defer s.bgDone.Done()
	t := time.NewTicker(s.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		if n, err := s.ReapOnce(s.bg); err != nil && s.bg.Err() == nil {
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
// reaper's, a tick that resumes a dead replica's runs (a transaction each)
// would hold back the threads that replica was delivering.
func (s *Runs) outboxSweeper() {
	defer s.bgDone.Done()
	t := time.NewTicker(s.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		if n, err := s.out.Sweep(s.bg); err != nil && s.bg.Err() == nil {
			s.log.Warn("Could not sweep the notification outbox.", zap.Error(err))
		} else if n > 0 {
			s.log.Info("Gave waiting thread operations a new deliverer.", zap.Int("threads", n))
		}
		if n, err := s.art.SweepManifests(s.bg, s.cfg.LeaseTimeout); err != nil && s.bg.Err() == nil {
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

// ReapOnce is one tick of the reaper: it resumes the runs abandoned now and
// returns how many.
func (s *Runs) ReapOnce(ctx context.Context) (int, error) {
	n := 0
	for _, k := range []database.Abandon{database.Expired, database.Stranded} {
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
				s.m.Resumed.Inc()
			}
		}
	}
	return n, nil
}

// reapCandidates lists up to 100 runs abandoned in kind k (an index read on
// every reaper tick of every replica: see database.Runs.ReapQuery).
func (s *Runs) reapCandidates(ctx context.Context, k database.Abandon) ([]database.Abandoned, error) {
	cands, err := s.tables.Runs.Abandoned(ctx, s.db, k, s.cfg.LeaseTimeout, vocab.StatusQueued)
	if err != nil {
		return nil, fmt.Errorf("runner: reaper: scan: %w", err)
	}
	return cands, nil
}

// resume moves one abandoned run back to the queue with a new job, if it is
// still abandoned in kind k and held by the owner scanned (both re-checked in
// the update). Its thread reply, recorded in the same commit, carries that
// owner, so it can say which replica gave the run up and which one took it.
func (s *Runs) resume(ctx context.Context, k database.Abandon, c database.Abandoned) (bool, error) {
	id, gen := c.ID, c.Generation
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("runner: reaper: begin: %w", err)
	}
	defer tx.Rollback()
	// The thread says so in the same commit: an attempt that dies before its
	// own record (recordResumed, then a no-op repeat), or a job lost before it
	// claims the run, must not leave the counter ahead of the thread. A run
	// another replica's reaper is taking is skipped (see Runs.Resume).
	resumed, err := s.tables.Runs.Resume(ctx, tx, k, s.cfg.LeaseTimeout, vocab.StatusQueued, c)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil // another process won or is taking it, the owner renewed, or the job started it
	case err != nil:
		return false, fmt.Errorf("runner: reaper: take run %s: %w", id, err)
	}
	// Who takes it over is not known yet: the claimer adds it to the ref
	// (recordResumed); a deliverer that comes first waits for it (outbox.Resumed).
	if err := s.out.Append(ctx, tx, id, outbox.Resumed{N: resumed, From: c.Owner}); err != nil {
		return false, fmt.Errorf("runner: reaper: run %s: %w", id, err)
	}
	if err := s.Enqueue(ctx, tx, []RunJob{{RunID: id, Generation: gen + 1}}); err != nil {
		return false, fmt.Errorf("runner: reaper: run %s: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("runner: reaper: commit run %s: %w", id, err)
	}
	if k == database.Stranded {
		s.log.Info("Resuming a queued run whose job was lost before it claimed the run.", zap.String("run", id), zap.Int("generation", gen+1))
	} else {
		s.log.Info("Resuming a run whose owner stopped heartbeating.", zap.String("run", id), zap.Int("generation", gen+1),
			zap.String("from", c.Owner))
	}
	return true, nil
}
