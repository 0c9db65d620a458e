package artifacts

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vocab"
)

func TestReplicaName(t *testing.T) {
	if got := ReplicaName("autocapture-0"); got != "autocapture-0" {
		t.Errorf("configured name changed to %q", got)
	}
	got := ReplicaName("")
	if !queueName.MatchString("autocapture_upload_"+got) || len("autocapture_upload_"+got) > 64 {
		t.Errorf("hostname gives replica %q: not a River queue name", got)
	}
}

// queueName is River's rule for queue names.
var queueName = regexp.MustCompile(`^(?:[a-z0-9])+(?:[_|\-]?[a-z0-9]+)*$`)

// s3Spool is a spool in dir over a bucket of srv (its own prefix per test).
func s3Spool(t *testing.T, srv *testenv.S3Server, prefix, dir string) (*storage.Spool, *storage.S3) {
	t.Helper()
	s3, err := storage.NewS3(context.Background(), storage.S3Options{Bucket: srv.Bucket, Prefix: prefix, Region: srv.Region,
		Endpoint: srv.Endpoint, PathStyle: true, AccessKeyID: srv.AccessKeyID, SecretAccessKey: srv.SecretAccessKey})
	if err != nil {
		t.Fatal(err)
	}
	sp, err := storage.NewSpool(s3, dir, storage.DefaultCompression)
	if err != nil {
		t.Fatal(err)
	}
	sp.DownFor = -1
	return sp, s3
}

// spoolFiles lists the keys in the spool.
func spoolFiles(t *testing.T, sp *storage.Spool) []string {
	t.Helper()
	var keys []string
	if err := sp.Spooled(context.Background(), func(o vocab.Object, _ time.Time) error {
		keys = append(keys, o.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return keys
}

// uploadState is key's upload row as the runs API shows it (false: none).
func (h *harness) uploadState(t *testing.T, runID, key string) (runs.Upload, bool) {
	t.Helper()
	ups, err := h.k.LoadUploads(context.Background(), h.db, runID)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range ups {
		if u.Key == key {
			return u, true
		}
	}
	return runs.Upload{}, false
}

// TestUploadAfterKill9BeforeTheRow: a replica killed after a spool file was
// written but before its row and job (no hook ran), and one killed after an
// upload whose row was never marked (the file gone, the row pending): a new
// process on the same database and spool folder uploads the first and marks
// both.
func TestUploadAfterKill9BeforeTheRow(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		ctx := context.Background()
		srv := testenv.StartVersityGW(t)
		dir := t.TempDir()
		sp, s3 := s3Spool(t, srv, "kill9", dir)
		done, err := sp.Put(ctx, "2026/12/01/VLLMSlowTTFT/r-gone/pb/snapshot/done.json", strings.NewReader(`{"done":true}`), vocab.ObjectMeta{})
		if err != nil || done.Pending {
			t.Fatalf("direct put = %+v, %v", done, err)
		}
		srv.Proc.Stop()
		orphan, err := sp.Put(ctx, "2026/12/01/VLLMSlowTTFT/r-killed/pb/snapshot/prometheus.json",
			strings.NewReader(strings.Repeat(`{"x":1}`, 500)), vocab.ObjectMeta{})
		if err != nil || !orphan.Pending {
			t.Fatalf("put while down = %+v, %v; want pending", orphan, err)
		}
		srv.Restart(t)

		// The previous process recorded the uploaded one's row, not its mark.
		first := newHarness(t, db, nil, false)
		if _, err := first.db.ExecContext(ctx, `INSERT INTO autocapture_uploads
			(object_key, run_id, replica, size, sha256, state, created_at) VALUES ($1, 'r-gone', 'r0', $2, $3, 'pending', 0)`,
			done.Key, done.Size, done.SHA256); err != nil {
			t.Fatal(err)
		}
		first.stop()

		sp2, _ := s3Spool(t, srv, "kill9", dir) // the restarted process's spool over the same folder
		h := newHarness(t, db, nil, true, withSpool(sp2))
		waitFor(t, "both uploads marked", func() bool {
			a, _ := h.uploadState(t, "r-killed", orphan.Key)
			b, _ := h.uploadState(t, "r-gone", done.Key)
			return a.State == "uploaded" && b.State == "uploaded"
		})
		st, err := s3.Stat(ctx, orphan.Key)
		if err != nil || st.SHA256 != orphan.SHA256 {
			t.Errorf("the orphan's object %+v, %v; want sha256 %s", st, err, orphan.SHA256)
		}
		if got := spoolFiles(t, sp2); len(got) != 0 {
			t.Errorf("spool after the scan's uploads: %v", got)
		}
	})
}

// downable is a Local primary that can be made unavailable, as a bucket
// whose server refuses connections is.
type downable struct {
	*storage.Local
	down atomic.Bool
}

var errRefused = fmt.Errorf("dial tcp 127.0.0.1:9: %w", syscall.ECONNREFUSED)

func (d *downable) Put(ctx context.Context, key string, r io.Reader, meta vocab.ObjectMeta) (vocab.Object, error) {
	if d.down.Load() {
		return vocab.Object{}, errRefused
	}
	return d.Local.Put(ctx, key, r, meta)
}

func (d *downable) Stat(ctx context.Context, key string) (vocab.Object, error) {
	if d.down.Load() {
		return vocab.Object{}, errRefused
	}
	return d.Local.Stat(ctx, key)
}

// PutStored stores the spool's bytes as they are (both sides uncompressed).
func (d *downable) PutStored(ctx context.Context, obj vocab.Object, r io.Reader) (vocab.Object, error) {
	if d.down.Load() {
		return vocab.Object{}, errRefused
	}
	return d.Local.Put(ctx, obj.Key, r, vocab.ObjectMeta{ContentType: obj.ContentType})
}

// TestLateUploadsOfARunLandTogether: two artifacts of one run spooled while
// the store is down are retried with a backoff, counted and kept; when the
// store answers both land, the run is told once, with both, after the last,
// and the thread's reply counts them. A row whose file and object are both
// gone is given up loudly, not retried for ever.
func TestLateUploadsOfARunLandTogether(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		ctx := context.Background()
		primary := &downable{Local: newLocalStore(t)}
		sp, err := storage.NewSpool(primary, t.TempDir(), storage.CompressionNone)
		if err != nil {
			t.Fatal(err)
		}
		sp.DownFor = -1
		h := newHarness(t, db, nil, true, withSpool(sp))
		created := time.Now()
		h.addRun(t, "run-late", "running", created)
		primary.down.Store(true)
		var keys []string
		for _, file := range []string{"a.json", "b.json"} {
			obj, err := sp.Put(ctx, artifactKey("run-late", created, "snapshot", file), strings.NewReader(`{"file":"`+file+`"}`),
				vocab.ObjectMeta{ContentType: "application/json"})
			if err != nil || !obj.Pending {
				t.Fatalf("put %s while down = %+v, %v; want pending", file, obj, err)
			}
			keys = append(keys, obj.Key)
		}
		waitFor(t, "two failed attempts of each", func() bool {
			for _, k := range keys {
				if u, _ := h.uploadState(t, "run-late", k); u.Attempts < 2 || !strings.Contains(u.LastError, "connection refused") {
					return false
				}
			}
			return true
		})
		if n := h.runs.uploadsDone("run-late"); n != 0 {
			t.Fatalf("the run was told %d uploads landed while the store was down", n)
		}
		primary.down.Store(false)
		waitFor(t, "the run told its uploads landed", func() bool { return h.runs.uploadsDone("run-late") > 0 })
		if n := h.runs.uploadsDone("run-late"); n != 2 {
			t.Errorf("the run was told %d uploads landed, want 2 at once", n)
		}
		for _, k := range keys {
			if _, err := primary.Local.Stat(ctx, k); err != nil || h.k.Pending(ctx, k) {
				t.Errorf("%s: in the store: %v; pending: %v", k, err, h.k.Pending(ctx, k))
			}
		}
		rep, err := h.k.UploadsReply(ctx, "run-late", "uploads/done/2", true)
		if err != nil || !strings.HasPrefix(rep.Notice, "late uploads done: 2 artifacts kept") || !rep.Retry || rep.RunID != "run-late" {
			t.Errorf("the thread's reply %+v, %v", rep, err)
		}

		// A pending row with neither a spool file nor an object.
		lost := artifactKey("run-late", created, "snapshot", "lost.json")
		if _, err := h.db.ExecContext(ctx, `INSERT INTO autocapture_uploads (object_key, run_id, replica, size, sha256, state, created_at)
			VALUES ($1, 'run-late', 'r0', 1, 'x', 'pending', 0)`, lost); err != nil {
			t.Fatal(err)
		}
		if err := h.k.workUpload(ctx, lost); err == nil || !strings.Contains(err.Error(), "not in the spool") {
			t.Errorf("a lost upload's job: %v, want it cancelled as lost", err)
		}
		if !h.k.Pending(ctx, lost) {
			t.Error("a lost upload no longer reads pending: it was marked uploaded")
		}
	})
}
