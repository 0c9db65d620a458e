package runner

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vocab"
)

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

// artifactStep stores body as the step's artifact the way capture's steps do.
func uploadArtifactStep(name string, body []byte) playbooks.PlannedStep {
	return fakestep.Step("snapshot", vocab.TierMetrics, fakestep.Func(func(ctx context.Context, in *vocab.Input) (*vocab.Result, error) {
		key := storage.ArtifactKey(storage.ArtifactPath{Started: in.RunCreated, Alertname: in.Alert.Labels["alertname"],
			RunID: in.RunID, Plan: in.Plan, Step: in.StepID, File: name, Attempt: in.Attempt})
		obj, err := in.Env.Store.Put(ctx, key, bytes.NewReader(body), vocab.ObjectMeta{ContentType: "application/json"})
		if err != nil {
			return nil, err
		}
		return &vocab.Result{Summary: "stored " + name, Artifacts: []vocab.Artifact{{Name: name, Key: obj.Key,
			ContentType: "application/json", Size: obj.Size, SHA256: obj.SHA256, Pending: obj.Pending}}}, nil
	}))
}

func withSpool(sp *storage.Spool) svcOpt {
	return func(o *Options) { o.Env, o.Spool = &vocab.Env{Store: sp}, sp }
}

// withUploadBackoff shortens the wait after a failed late upload.
func withUploadBackoff(d time.Duration) svcOpt { return func(o *Options) { o.uploadBackoff = d } }

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

// TestUploadAfterOutage: the bucket's server is stopped (the process this
// test started, by pid); a step's artifact goes to the spool and the step
// succeeds with it pending, which its reply and the run API say; the server
// comes back on the same port and the upload job puts it there: the stored
// sha256 is the one the step recorded, the spool is empty, the row is
// uploaded and the thread says so.
func TestUploadAfterOutage(t *testing.T) {
	t.Parallel()
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		ctx := context.Background()
		srv := testenv.StartVersityGW(t)
		sp, s3 := s3Spool(t, srv, "outage", t.TempDir())
		body := []byte(strings.Repeat(`{"metric":"vllm:num_requests_waiting","value":42}`+"\n", 2000))
		rec := &recNotifier{}
		s := newService(t, db, planner(func() playbooks.PlannedStep { return uploadArtifactStep("prometheus.json", body) }), false,
			notifyTo(rec), withSpool(sp), withUploadBackoff(50*time.Millisecond))
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		srv.Proc.Stop()

		acc := acceptOne(t, s, firing("fp-outage", time.Now()))
		r := waitRun(t, s, acc.RunID, "finished", isFinished)
		step := stepByID(r, "snapshot")
		if r.Status != vocab.StatusSucceeded || len(step.Artifacts) != 1 || !step.Artifacts[0].Pending {
			t.Fatalf("run %s, step %+v: want succeeded with one pending artifact", r.Status, step)
		}
		art := step.Artifacts[0]
		if len(r.Uploads) != 1 || r.Uploads[0].Key != art.Key || r.Uploads[0].State != "pending" || r.Uploads[0].Replica != s.art.Replica() {
			t.Errorf("run API uploads %+v, want %s pending on %s", r.Uploads, art.Key, s.art.Replica())
		}
		rec.eventually(t, "the step's artifact as stored locally, upload pending", func() bool {
			for _, rep := range rec.replies {
				if rep.StepID == "snapshot" && len(rep.Links) == 1 && rep.Links[0].Pending && rep.Links[0].URL == "" {
					return true
				}
			}
			return false
		})
		if got := spoolFiles(t, sp); len(got) != 1 || got[0] != art.Key {
			t.Fatalf("spool holds %v, want %s", got, art.Key)
		}
		waitRun(t, s, acc.RunID, "an upload attempt recorded", func(r *runs.Run) bool {
			return len(r.Uploads) == 1 && r.Uploads[0].Attempts > 0 && r.Uploads[0].LastError != ""
		})

		srv.Restart(t)
		r = waitRun(t, s, acc.RunID, "uploaded", func(r *runs.Run) bool { return len(r.Uploads) == 1 && r.Uploads[0].State == "uploaded" })
		if r.Uploads[0].UploadedAt == nil || r.Uploads[0].LastError != "" {
			t.Errorf("uploaded row %+v: want uploaded_at and no error", r.Uploads[0])
		}
		st, err := s3.Stat(ctx, art.Key)
		if err != nil || st.SHA256 != art.SHA256 || st.Size != art.Size {
			t.Errorf("the bucket's object %+v, %v; want the recorded sha256 %s, %d bytes", st, err, art.SHA256, art.Size)
		}
		if got := spoolFiles(t, sp); len(got) != 0 {
			t.Errorf("spool after the upload: %v", got)
		}
		rec.eventually(t, "uploaded", func() bool {
			for _, rep := range rec.replies {
				if rep.Key == "uploads/done/1" && strings.HasPrefix(rep.Notice, "late uploads done: 1 artifact kept") && len(rep.Links) == 1 &&
					strings.Contains(rep.Links[0].URL, "/outage/"+art.Key) {
					return true
				}
			}
			return false
		})
	})
}
