package artifacts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/riverqueue/river"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vocab"
)

// Retention (config retention:) deletes finished runs older than
// retention.runs: first the run's objects (every key under its folder,
// storage.RunPrefix, and every key its step records and manifest name, since
// an older layout may have put some elsewhere), then all its rows in one
// transaction. With retention.artifacts: bucket a lifecycle rule expires the
// objects and only rows go.
//
// A River periodic job (kind autocapture_retention, its own queue) does it:
// River inserts periodic jobs on the elected leader only, so one replica
// deletes at a time. Ages are on the DATABASE's clock ({now}), like leases
// and cooldowns: a replica with a skewed clock deletes nothing early.
//
// A kill -9 between a run's objects and its rows leaves the rows, whose
// objects are (partly) gone: the next tick finds the run again, deletes its
// objects again (a missing key is not an error) and then its rows. An
// unfinished run, or one younger than the cutoff, is never selected, and the
// row delete checks both again.

// retentionBatch is how many runs one statement selects; a tick works
// batches until none is left.
const retentionBatch = 100

// RetentionKind names retention's job kind in River's table.
const RetentionKind = "autocapture_retention"

type retentionArgs struct{}

// Kind names the job kind in River's table.
func (retentionArgs) Kind() string { return RetentionKind }

// InsertOpts: one attempt (the next tick is the retry).
func (retentionArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: Queue, MaxAttempts: 1}
}

type retentionWorker struct {
	river.WorkerDefaults[retentionArgs]
	k *Keeper
}

// Timeout: a tick over a large backlog may take a while; bounded by the interval.
func (w *retentionWorker) Timeout(*river.Job[retentionArgs]) time.Duration {
	return max(time.Minute, w.k.retention().Interval)
}

func (w *retentionWorker) Work(ctx context.Context, _ *river.Job[retentionArgs]) error {
	n, err := w.k.RetentionOnce(ctx)
	if n > 0 {
		w.k.log.Info("Retention deleted old runs.", zap.Int("runs", n))
	}
	if err != nil {
		w.k.log.Warn("Retention could not delete every old run; the next tick tries again.", zap.Error(err))
	}
	return nil // counted and logged; the next tick retries
}

// retention is the configured retention with defaults filled in.
func (k *Keeper) retention() config.Retention {
	r := k.d.Retention
	d := config.Default().Retention
	if r.Artifacts == "" {
		r.Artifacts = d.Artifacts
	}
	if r.Interval <= 0 {
		r.Interval = d.Interval
	}
	return r
}

// PeriodicJobs are the jobs River's leader inserts on a schedule: retention,
// when runs are not kept for ever.
func (k *Keeper) PeriodicJobs() []*river.PeriodicJob {
	r := k.retention()
	if r.Runs <= 0 {
		return nil
	}
	return []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(r.Interval),
		func() (river.JobArgs, *river.InsertOpts) { return retentionArgs{}, nil },
		&river.PeriodicJobOpts{RunOnStart: true, ID: "autocapture_retention"})}
}

// OldRun is a run retention deletes.
type OldRun struct {
	ID, Alertname string
	Created       time.Time
	Manifest      string // its manifest's key, "" when none was written
}

// RetentionOnce deletes the finished runs older than retention.runs, a batch
// at a time, and returns how many went. A run whose objects cannot all be
// deleted keeps its rows (the next tick tries again) and counts as an error.
//
// Passes in one process take turns (retentionMu): River's periodic job runs
// one on start, and two passes over the same old run raced each other's
// deletes (the later List found objects the earlier pass was deleting).
// Across replicas only River's elected leader runs the job.
func (k *Keeper) RetentionOnce(ctx context.Context) (int, error) {
	r := k.retention()
	if r.Runs <= 0 {
		return 0, nil
	}
	k.retentionMu.Lock()
	defer k.retentionMu.Unlock()
	ageMS := time.Duration(r.Runs).Milliseconds()
	deleted := 0
	var errs []error
	failed := map[string]bool{} // kept this tick, not selected again
	for {
		batch, err := k.OldRuns(ctx, ageMS, failed)
		if err != nil {
			k.m.RetentionErrors.Inc()
			return deleted, errors.Join(append(errs, err)...)
		}
		for _, run := range batch {
			if err := k.deleteOldRun(ctx, run, ageMS, r.Artifacts == config.RetainArtifactsDelete); err != nil {
				k.m.RetentionErrors.Inc()
				errs = append(errs, err)
				failed[run.ID] = true
				continue
			}
			deleted++
		}
		if len(batch) < retentionBatch || ctx.Err() != nil {
			return deleted, errors.Join(errs...)
		}
	}
}

// OldRuns selects up to a batch of finished runs older than ageMS on the
// database's clock, oldest first, except those in skip.
func (k *Keeper) OldRuns(ctx context.Context, ageMS int64, skip map[string]bool) ([]OldRun, error) {
	rows, err := k.tables.Runs.Old(ctx, k.db(), ageMS, retentionBatch+len(skip))
	if err != nil {
		return nil, fmt.Errorf("runner: retention: select old runs: %w", err)
	}
	var out []OldRun
	for _, o := range rows {
		r := OldRun{ID: o.ID, Alertname: o.Alertname, Created: time.UnixMilli(o.CreatedAt).UTC(), Manifest: o.ManifestKey}
		if !skip[r.ID] && len(out) < retentionBatch {
			out = append(out, r)
		}
	}
	return out, nil
}

// deleteOldRun deletes the run's objects (when objects), then its rows.
func (k *Keeper) deleteOldRun(ctx context.Context, r OldRun, ageMS int64, objects bool) error {
	if objects {
		if err := k.DeleteRunObjects(ctx, r); err != nil {
			return err
		}
	}
	// kill -9 here: rows without (all) their objects; the next tick deletes
	// again and then the rows.
	return k.deleteRunRows(ctx, r.ID, ageMS)
}

// DeleteRunObjects deletes every object of the run: what is under its folder
// and what its records name. Without a store there is nothing to delete.
// It is the first half of a run's deletion (OldRuns selects the runs,
// RetentionOnce does both halves): a test stops after it, as a kill -9
// before the rows would.
func (k *Keeper) DeleteRunObjects(ctx context.Context, r OldRun) error {
	st := k.store()
	if st == nil {
		return nil
	}
	keys, err := k.recordedKeys(ctx, r.ID)
	if err != nil {
		return err
	}
	if r.Manifest != "" {
		keys = append(keys, r.Manifest)
	}
	prefix := storage.RunPrefix(r.Created, r.Alertname, r.ID)
	if err := st.List(ctx, prefix, func(e vocab.ListEntry) error {
		keys = append(keys, e.Key)
		return nil
	}); err != nil {
		return fmt.Errorf("runner: retention: run %s: %w", r.ID, err)
	}
	slices.Sort(keys)
	for _, key := range slices.Compact(keys) {
		if err := st.Delete(ctx, key); err != nil {
			return fmt.Errorf("runner: retention: run %s: %w", r.ID, err)
		}
		k.m.RetentionDeleted.WithLabelValues("objects").Inc()
	}
	return nil
}

// recordedKeys are the artifact keys the run's step records name.
func (k *Keeper) recordedKeys(ctx context.Context, runID string) ([]string, error) {
	records, err := k.tables.Steps.Records(ctx, k.db(), runID)
	if err != nil {
		return nil, fmt.Errorf("runner: retention: steps of %s: %w", runID, err)
	}
	var keys []string
	for _, raw := range records {
		var rec executor.StepRecord
		if json.Unmarshal([]byte(raw), &rec) != nil {
			continue // unreadable: its objects are still found under the folder
		}
		for _, a := range rec.Artifacts {
			if storage.ValidKey(a.Key) == nil {
				keys = append(keys, a.Key)
			}
		}
	}
	return keys, nil
}

// deleteRunRows deletes the run's rows in one transaction, the run's last,
// only if it is still finished and old (checked on the database's clock).
func (k *Keeper) deleteRunRows(ctx context.Context, runID string, ageMS int64) error {
	tx, err := k.db().BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("runner: retention: run %s: %w", runID, err)
	}
	defer tx.Rollback()
	old, err := k.tables.Runs.LockOld(ctx, tx, runID, ageMS)
	if err != nil {
		return fmt.Errorf("runner: retention: run %s: %w", runID, err)
	}
	if !old {
		return nil // gone, or no longer old enough
	}
	if err := k.tables.Runs.Delete(ctx, tx, runID); err != nil {
		return fmt.Errorf("runner: retention: run %s: %w", runID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("runner: retention: run %s: %w", runID, err)
	}
	k.m.RetentionDeleted.WithLabelValues("runs").Inc()
	return nil
}
