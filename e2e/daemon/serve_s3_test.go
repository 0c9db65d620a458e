package daemon

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/autocapture/autocapture/internal/testkit/manifestcheck"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// s3Storage is a storage: section (after path) for the s3 backend on srv
// under prefix, with the secret read from secretFile.
func s3Storage(srv *testenv.S3Server, prefix, compression, secretFile string) string {
	return fmt.Sprintf("  backend: s3\n  compression: %s\n  s3:\n    bucket: %s\n    prefix: %s\n    endpoint: %s\n"+
		"    path_style: true\n    region: %s\n    access_key_id: %s\n    secret_access_key_file: %s\n",
		compression, srv.Bucket, prefix, srv.Endpoint, srv.Region, srv.AccessKeyID, secretFile)
}

// writeSecret writes secret to a fresh file and returns its path.
func writeSecret(t *testing.T, secret string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "s3-secret")
	if err := os.WriteFile(p, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// waitFinished waits for run id to leave queued and running.
func waitFinished(t *testing.T, d *daemon, id string) runs.Run {
	t.Helper()
	var r runs.Run
	waitFor(t, 60*time.Second, "run "+id+" to finish", func() bool {
		r = d.run(t, id)
		return r.Status != vocab.StatusQueued && r.Status != vocab.StatusRunning
	})
	return r
}

// TestServeStoresEveryArtifact: for the default local backend and for s3, the
// daemon stores every artifact of a run, and the sha256 and size the runs API
// lists are those of the stored bytes. On s3 they are in the bucket under the
// prefix and nowhere else, and storage.compression reaches the bucket (zstd,
// not the default gzip); the local store compresses with the default gzip
// under storage.path/artifacts.
func TestServeStoresEveryArtifact(t *testing.T) {
	t.Parallel()
	const prefix = "prod/autocapture"
	tests := []struct {
		name string
		// setup fills the storage options and returns a reader of the
		// stored bytes of a key with their Content-Encoding, and a check of the
		// store as a whole given the number of artifacts the run listed.
		setup func(t *testing.T, o *daemonOpts) (read storedReader, after func(t *testing.T, listed int))
		// encoding is that of the JSON bodies the http steps store.
		encoding string
	}{
		{name: "local", encoding: "gzip",
			setup: func(t *testing.T, o *daemonOpts) (storedReader, func(*testing.T, int)) {
				o.Dir = t.TempDir()
				return func(key string) ([]byte, string, error) {
					b, err := os.ReadFile(filepath.Join(o.Dir, "artifacts", filepath.FromSlash(key)))
					enc := ""
					if len(b) > 2 && b[0] == 0x1f && b[1] == 0x8b {
						enc = "gzip"
					}
					return b, enc, err
				}, nil
			}},
		{name: "s3", encoding: "zstd",
			setup: func(t *testing.T, o *daemonOpts) (storedReader, func(*testing.T, int)) {
				srv := testenv.StartVersityGW(t)
				o.Storage = s3Storage(srv, prefix, "zstd", writeSecret(t, srv.SecretAccessKey))
				return bucketReader(srv, prefix), func(t *testing.T, listed int) { onlyUnderPrefix(t, srv, prefix, listed) }
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := &slowTarget{hits: map[string]int{}, slowHit: make(chan struct{}, 1)}
			web := httptest.NewServer(target)
			defer web.Close()
			o := &daemonOpts{Token: "store", Playbooks: twoStepPlaybook("store-all", "E2EStore", web.URL)}
			read, after := tt.setup(t, o)
			d := startDaemon(t, o)
			if tt.name == "s3" {
				waitFor(t, 30*time.Second, "autocapture_storage_up to be 1", func() bool {
					return d.metric(t, `autocapture_storage_up{backend="s3"}`) == 1
				})
			}
			code, b := d.post(t, webhookBody("E2EStore", "5353535353535353", "firing", time.Now().Add(-time.Minute)))
			id := runID(b)
			if code != 200 || id == "" {
				t.Fatalf("webhook: %d %s", code, b)
			}
			r := waitFinished(t, d, id)
			if r.Status != vocab.StatusSucceeded {
				t.Fatalf("run %s, want succeeded: %+v", r.Status, r)
			}
			listed, encodings := 0, map[string]int{}
			for _, st := range r.Steps {
				for _, a := range st.Artifacts {
					listed++
					body, enc, err := read(a.Key)
					if err != nil {
						t.Errorf("step %s artifact %s (%s): %v", st.ID, a.Name, a.Key, err)
						continue
					}
					sum := sha256.Sum256(body)
					if hex.EncodeToString(sum[:]) != a.SHA256 || int64(len(body)) != a.Size {
						t.Errorf("%s: stored %d bytes sha256 %x; the run recorded %d bytes sha256 %s", a.Key, len(body), sum, a.Size, a.SHA256)
					}
					encodings[enc]++
				}
			}
			if listed < 2 {
				t.Fatalf("%d artifacts listed for a run of two http steps, want at least 2: %+v", listed, r.Steps)
			}
			if encodings[tt.encoding] != listed {
				t.Errorf("content encodings of the stored artifacts %v, want all %d JSON bodies %s", encodings, listed, tt.encoding)
			}
			checkManifest(t, d, r, read)
			if after != nil {
				after(t, listed+1) // and the manifest
			}
		})
	}
}

// checkManifest waits for the run's manifest.json and checks it against the
// run and the store (manifestcheck.Check).
func checkManifest(t *testing.T, d *daemon, r runs.Run, read storedReader) {
	t.Helper()
	waitFor(t, 30*time.Second, "the run's manifest", func() bool {
		r = d.run(t, r.ID)
		return r.Manifest != ""
	})
	if manifestcheck.Check(t, &r, manifestcheck.Read(read)) == 0 {
		t.Fatal("the manifest names no artifact: the check proves nothing")
	}
}

// bucketReader reads the stored bytes of a key under prefix in srv's bucket.
func bucketReader(srv *testenv.S3Server, prefix string) storedReader {
	client := srv.Client()
	return func(key string) ([]byte, string, error) {
		in := &s3.GetObjectInput{Bucket: aws.String(srv.Bucket), Key: aws.String(prefix + "/" + key)}
		obj, err := client.GetObject(context.Background(), in)
		if err != nil {
			return nil, "", err
		}
		defer obj.Body.Close()
		b, err := io.ReadAll(obj.Body)
		return b, aws.ToString(obj.ContentEncoding), err
	}
}

// storedReader returns the stored bytes of a key and their Content-Encoding.
type storedReader func(key string) ([]byte, string, error)

// onlyUnderPrefix checks that the bucket holds exactly the listed objects
// (the run's artifacts and its manifest), all under prefix.
func onlyUnderPrefix(t *testing.T, srv *testenv.S3Server, prefix string, listed int) {
	t.Helper()
	list, err := srv.Client().ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(srv.Bucket)})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range list.Contents {
		if !strings.HasPrefix(aws.ToString(o.Key), prefix+"/") {
			t.Errorf("object %s outside the prefix %s", aws.ToString(o.Key), prefix)
		}
	}
	if len(list.Contents) != listed {
		t.Errorf("%d objects in the bucket, want %d (the run's artifacts and its manifest)", len(list.Contents), listed)
	}
}

// TestServeWithWrongS3CredentialsStillRuns: a bucket the daemon cannot use
// (a wrong secret) does not stop it: it becomes ready, logs one error line
// naming bucket and endpoint and never the secret, reports
// autocapture_storage_up{backend="s3"} 0, and runs still start (their steps
// record the upload's failure, again without the secret).
func TestServeWithWrongS3CredentialsStillRuns(t *testing.T) {
	t.Parallel()
	srv := testenv.StartVersityGW(t)
	raw := make([]byte, 12)
	rand.Read(raw)
	canary := "canary" + hex.EncodeToString(raw)
	target := &slowTarget{hits: map[string]int{}, slowHit: make(chan struct{}, 1)}
	web := httptest.NewServer(target)
	defer web.Close()
	d := startDaemon(t, &daemonOpts{Token: "s3", Playbooks: twoStepPlaybook("s3-denied", "E2ES3Denied", web.URL),
		Storage: s3Storage(srv, "prod", "gzip", writeSecret(t, canary))}) // fails unless /-/ready answers
	waitFor(t, 30*time.Second, "autocapture_storage_up to be 0", func() bool {
		return d.metric(t, `autocapture_storage_up{backend="s3"}`) == 0
	})
	code, b := d.post(t, webhookBody("E2ES3Denied", "dededededededede", "firing", time.Now().Add(-time.Minute)))
	id := runID(b)
	if code != 200 || id == "" {
		t.Fatalf("webhook: %d %s", code, b)
	}
	r := waitFinished(t, d, id)
	if target.count("/fast") == 0 {
		t.Errorf("the run never reached its target: %+v", r)
	}
	if r.Status == vocab.StatusSucceeded || len(r.Steps) == 0 || !strings.Contains(r.Steps[0].Error, "access denied") {
		t.Errorf("run %s, want its first step failed on the denied upload: %+v", r.Status, r)
	}
	req, _ := http.NewRequest("GET", d.URL+"/api/v1/runs/"+id, nil)
	if _, body := d.do(t, req); strings.Contains(string(body), canary) {
		t.Errorf("the runs API shows the secret: %s", body)
	}

	logs := d.Proc.Logs()
	if strings.Contains(logs, canary) {
		t.Fatalf("the daemon's log holds the secret:\n%s", logs)
	}
	var bucketErrors []string
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "ERROR") && strings.Contains(line, "artifact bucket") {
			bucketErrors = append(bucketErrors, line)
		}
	}
	if len(bucketErrors) != 1 {
		t.Fatalf("%d error lines about the bucket, want 1:\n%s", len(bucketErrors), strings.Join(bucketErrors, "\n"))
	}
	line := bucketErrors[0]
	for _, want := range []string{"s3 bucket " + srv.Bucket + " at " + srv.Endpoint, "access denied"} {
		if !strings.Contains(line, want) {
			t.Errorf("the error line lacks %q:\n%s", want, line)
		}
	}
}
