package artifacts

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vocab"
)

// uploadArgs is one late upload. Boot makes the job unique per key and
// process: a restarted replica inserts its own even while River still holds
// the dead process's job as running.
type uploadArgs struct {
	Key  string `json:"key"`
	Boot string `json:"boot"`
}

// Kind names the job kind in River's table.
func (uploadArgs) Kind() string { return "autocapture_upload" }

// InsertOpts: the queue is the replica's, given at insert (uploadOpts).
func (uploadArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: jobMaxAttempts, UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// Spool is what the Keeper needs of the local spool (storage.Spool).
type Spool interface {
	OnSpool(fn func(ctx context.Context, obj vocab.Object))
	Upload(ctx context.Context, key string) (vocab.Object, error)
	Spooled(ctx context.Context, fn func(obj vocab.Object, spooled time.Time) error) error
	Has(ctx context.Context, key string) bool
}

var _ Spool = (*storage.Spool)(nil)

const (
	// uploadWorkers uploads run at once on a replica.
	uploadWorkers = 2
	// uploadBackoffMax caps the wait between two attempts of an upload.
	uploadBackoffMax = 5 * time.Minute
)

// uploader is the Keeper's late-upload state (nil without a spool).
type uploader struct {
	spool   Spool
	replica string
	queue   string
	// backoff is the first wait after a failure, doubled per attempt; scan
	// is how often the spool is scanned for files without a row.
	backoff, scan time.Duration
}

// newUploader sets up late uploads for d.Spool (nil without one).
func newUploader(d Deps) *uploader {
	if d.Spool == nil {
		return nil
	}
	r := ReplicaName(d.Replica)
	backoff := d.UploadBackoff
	if backoff <= 0 {
		backoff = time.Second
	}
	return &uploader{spool: d.Spool, replica: r, queue: "autocapture_upload_" + r, backoff: backoff, scan: time.Minute}
}

// Replica is the replica whose queue takes this process's late uploads;
// "" without a spool.
func (k *Keeper) Replica() string {
	if k.up == nil {
		return ""
	}
	return k.up.replica
}

// ReplicaName is runs.replica, or else the hostname made a queue-name
// suffix: lower case, [a-z0-9] with single '_' between runs, at most 45
// characters ("replica" when nothing is left).
func ReplicaName(configured string) string {
	if configured != "" {
		return configured
	}
	host, _ := os.Hostname()
	var b strings.Builder
	sep := false
	for _, r := range strings.ToLower(host) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			if sep && b.Len() > 0 {
				b.WriteByte('_')
			}
			b.WriteRune(r)
			sep = false
		} else {
			sep = true
		}
	}
	name := strings.TrimRight(b.String()[:min(b.Len(), 45)], "_")
	if name == "" {
		return "replica"
	}
	return name
}

func (u *uploader) opts() *river.InsertOpts {
	return &river.InsertOpts{Queue: u.queue, MaxAttempts: jobMaxAttempts, UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// uploadWorker hands River's upload jobs to the Keeper.
type uploadWorker struct {
	river.WorkerDefaults[uploadArgs]
	k *Keeper
}

// Timeout: an upload of a large artifact is bounded by the store, not River's minute.
func (w *uploadWorker) Timeout(*river.Job[uploadArgs]) time.Duration { return -1 }

func (w *uploadWorker) Work(ctx context.Context, job *river.Job[uploadArgs]) error {
	return w.k.workUpload(ctx, job.Args.Key)
}

// runIDOfKey is the run id segment of an artifact key
// (yyyy/mm/dd/<alertname>/<run-id>/…), "" for another key.
func runIDOfKey(key string) string {
	parts := strings.Split(key, "/")
	if len(parts) < 6 || len(parts[0]) != 4 || len(parts[1]) != 2 || len(parts[2]) != 2 {
		return ""
	}
	return parts[4]
}

// spooled is the spool's OnSpool hook: the file is durable; record the row
// and the job in one transaction. A failure here leaves the file for the
// scans (logged, not the step's failure: the bytes are safe).
func (k *Keeper) spooled(ctx context.Context, obj vocab.Object) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	err := k.recordUpload(ctx, obj, true, uploadArgs{Key: obj.Key, Boot: k.d.Owner + "/" + uuid.NewString()[:8]})
	if err != nil {
		k.log.Error("An artifact is kept in the local spool, but its upload could not be recorded; the spool scan retries.",
			zap.String("key", obj.Key), zap.Error(err))
		return
	}
	k.log.Warn("The artifact store is unavailable: the artifact is kept in the local spool and uploaded when it answers.",
		zap.String("key", obj.Key), zap.Int64("size", obj.Size), zap.String("replica", k.up.replica))
}

// recordUpload writes obj's row as pending (again, when it was uploaded and
// is spooled anew) with repend, or only when it has none without it, and
// inserts args' job when it wrote the row or repend is set.
func (k *Keeper) recordUpload(ctx context.Context, obj vocab.Object, repend bool, args uploadArgs) error {
	tx, err := k.db().BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("runner: record upload %s: %w", obj.Key, err)
	}
	defer tx.Rollback()
	wrote, err := k.tables.Uploads.Record(ctx, tx, database.Upload{Key: obj.Key, RunID: runIDOfKey(obj.Key),
		Replica: k.up.replica, Size: obj.Size, SHA256: obj.SHA256}, repend)
	if err != nil {
		return fmt.Errorf("runner: record upload %s: %w", obj.Key, err)
	}
	if !wrote && !repend {
		return nil // recorded already
	}
	if _, err := k.client().InsertTx(ctx, tx, args, k.up.opts()); err != nil {
		return fmt.Errorf("runner: record upload %s: enqueue: %w", obj.Key, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("runner: record upload %s: commit: %w", obj.Key, err)
	}
	return nil
}

// scanSpool records the spool's files. full (once at startup): every file's
// row is made pending and gets a job of this process, and so does every
// pending row of this replica (its job may have died with the last
// process); else only files without a row are recorded.
func (k *Keeper) scanSpool(ctx context.Context, full bool) (int, error) {
	n := 0
	err := k.up.spool.Spooled(ctx, func(obj vocab.Object, _ time.Time) error {
		n++
		return k.recordUpload(ctx, obj, full, uploadArgs{Key: obj.Key, Boot: k.d.Owner})
	})
	if err != nil || !full {
		return n, err
	}
	keys, err := k.tables.Uploads.Pending(ctx, k.db(), k.up.replica)
	if err != nil {
		return n, fmt.Errorf("runner: pending uploads: %w", err)
	}
	for _, key := range keys {
		if _, err := k.client().Insert(ctx, uploadArgs{Key: key, Boot: k.d.Owner}, k.up.opts()); err != nil {
			return n, fmt.Errorf("runner: pending upload %s: enqueue: %w", key, err)
		}
	}
	return n, nil
}

// uploadLoop scans the spool fully once (retrying until that succeeds),
// then for files without a row every scan interval, until the Keeper stops.
func (k *Keeper) uploadLoop() {
	defer k.loops.Done()
	t := time.NewTicker(k.up.scan)
	defer t.Stop()
	full := true
	for {
		n, err := k.scanSpool(k.bg, full)
		switch {
		case err != nil && k.bg.Err() == nil:
			k.log.Warn("Could not scan the local spool for pending uploads.", zap.Bool("startup", full), zap.Error(err))
		case err == nil:
			if full && n > 0 {
				k.log.Info("Pending uploads found in the local spool.", zap.Int("files", n), zap.String("queue", k.up.queue))
			}
			full = false
		}
		select {
		case <-k.bg.Done():
			return
		case <-t.C:
		}
	}
}

// workUpload uploads one spooled key and marks its row; a failure snoozes
// the job with the backoff (never discarded: nothing is lost while the store
// is down; the row keeps the count and the last error for the API).
func (k *Keeper) workUpload(ctx context.Context, key string) error {
	u, err := k.tables.Uploads.Get(ctx, k.db(), key)
	state, sha, runID, attempts := u.State, u.SHA256, u.RunID, u.Attempts
	if errors.Is(err, sql.ErrNoRows) {
		return nil // a job is inserted only with its row: deleted since
	} else if err != nil {
		return fmt.Errorf("runner: upload %s: %w", key, err)
	}
	if state == "uploaded" && !k.up.spool.Has(ctx, key) {
		return nil
	}
	obj, err := k.up.spool.Upload(ctx, key)
	if err == nil && sha != "" && obj.SHA256 != sha {
		err = fmt.Errorf("upload %s: the store holds sha256 %s, the run recorded %s", key, obj.SHA256, sha)
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err() // stopping: River runs it again
		}
		attempts++
		if uerr := k.tables.Uploads.Failed(ctx, k.db(), key, truncate(err.Error(), 1000)); uerr != nil {
			return fmt.Errorf("runner: upload %s: record failure: %w (after %v)", key, uerr, err)
		}
		wait := min(k.up.backoff<<min(attempts-1, 20), uploadBackoffMax)
		log := k.log.With(zap.String("key", key), zap.Int("attempts", attempts), zap.Duration("retry_in", wait), zap.Error(err))
		switch {
		case errors.Is(err, storage.ErrNotFound):
			log.Error("A pending artifact is neither in the local spool nor in the store: it is lost (was the spool volume replaced?).")
			return river.JobCancel(err)
		case storage.Unavailable(err):
			log.Info("The artifact store is still unavailable; the upload waits.")
		default: // denied, conflict, …: a person must act; keep the bytes and say so loudly
			log.Error("The upload of a spooled artifact failed; it is retried, fix the store's configuration.")
		}
		return river.JobSnooze(wait)
	}
	return k.markUploaded(ctx, key, runID)
}

// markUploaded marks key uploaded and, when it was the run's last pending
// upload, has the run lifecycle record the thread's reply and the
// manifest's rewrite (Runs.UploadsDone), all in one
// transaction under the run row's lock (two uploads landing at once must
// not both see the other still pending).
func (k *Keeper) markUploaded(ctx context.Context, key, runID string) error {
	tx, err := k.db().BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("runner: upload %s: mark: %w", key, err)
	}
	defer tx.Rollback()
	if runID != "" {
		if err := k.tables.Runs.Lock(ctx, tx, runID); err != nil {
			return fmt.Errorf("runner: upload %s: lock run: %w", key, err)
		}
	}
	marked, err := k.tables.Uploads.MarkUploaded(ctx, tx, key)
	if err != nil {
		return fmt.Errorf("runner: upload %s: mark: %w", key, err)
	}
	if marked && runID != "" {
		pending, uploaded, err := k.tables.Uploads.Counts(ctx, tx, runID)
		if err != nil {
			return fmt.Errorf("runner: upload %s: count: %w", key, err)
		}
		if pending == 0 {
			if err := k.d.Runs.UploadsDone(ctx, tx, runID, uploaded); err != nil {
				return err
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("runner: upload %s: commit: %w", key, err)
	}
	k.log.Info("Uploaded a spooled artifact.", zap.String("key", key), zap.String("run", runID))
	return nil
}

// Pending says whether a step's artifact recorded pending still
// waits for its upload (its row is pending, or, when its row could not be
// recorded, its file is still in the spool).
func (k *Keeper) Pending(ctx context.Context, key string) bool {
	if k.up == nil {
		return false
	}
	state, err := k.tables.Uploads.State(ctx, k.db(), key)
	if errors.Is(err, sql.ErrNoRows) {
		return k.up.spool.Has(ctx, key)
	}
	return err != nil || state == "pending"
}

// UploadsReply is the thread's reply once a run's spooled artifacts are all
// uploaded (outbox.UploadsDone), with links made now.
func (k *Keeper) UploadsReply(ctx context.Context, runID, key string, retry bool) (notify.StepReport, error) {
	ups, err := k.LoadUploads(ctx, k.db(), runID)
	if err != nil {
		return notify.StepReport{}, fmt.Errorf("reply %s: %w", key, err)
	}
	what := fmt.Sprintf("%d artifacts kept in the local spool while the artifact store was unavailable are", len(ups))
	if len(ups) == 1 {
		what = "1 artifact kept in the local spool while the artifact store was unavailable is"
	}
	rep := notify.StepReport{RunID: runID, StepID: "uploads", Kind: "run", Status: vocab.StatusSucceeded, Key: key, Retry: retry,
		Notice: "late uploads done: " + what + " now in the store"}
	for _, u := range ups {
		if u.State != "uploaded" || k.store() == nil {
			continue
		}
		if link, _, err := k.store().Link(ctx, u.Key); err == nil {
			rep.Links = append(rep.Links, notify.Link{Name: path.Base(u.Key), URL: link})
		}
	}
	return rep, nil
}

// LoadUploads returns a run's late uploads, oldest first, read through q
// (the runs API reads a run in one transaction).
func (k *Keeper) LoadUploads(ctx context.Context, q database.RowsQuerier, runID string) ([]runs.Upload, error) {
	rows, err := k.tables.Uploads.List(ctx, q, runID)
	if err != nil {
		return nil, fmt.Errorf("runner: uploads of run %s: %w", runID, err)
	}
	var out []runs.Upload
	for _, r := range rows {
		u := runs.Upload{Key: r.Key, Replica: r.Replica, Size: r.Size, State: r.State, Attempts: r.Attempts,
			LastError: r.LastError, CreatedAt: time.UnixMilli(r.CreatedAt).UTC()}
		if r.UploadedAt.Valid {
			t := time.UnixMilli(r.UploadedAt.Int64).UTC()
			u.UploadedAt = &t
		}
		out = append(out, u)
	}
	return out, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
