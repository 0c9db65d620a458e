package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vocab"
)

// Path traversal end to end (issue 15, "Hostile input"): alerts whose
// alertname (a segment of every artifact key) is hostile reach the real
// binary through the webhook; each is refused or becomes a run whose
// artifacts and manifest land under storage.path (the filesystem around it
// is checked) or under the bucket's prefix (the bucket is listed).
// storage/traversal_test.go proves the same of the stores alone.

// traversalNames are the hostile alertnames.
var traversalNames = []string{
	"../../etc", "..", ".", "..%2f..%2fetc", "%2e%2e%2f", "/abs", "a/../../b", `..\..\win`, "nul\x00byte",
	strings.Repeat("../", 100), strings.Repeat("x", 3000), "\u2024\u2024/\u2024\u2024", "\uff0e\uff0e\uff0fetc", "~/.ssh", ".hidden",
}

// traversalAlert is a webhook body for one alert labelled team=traversal
// with alertname name (JSON-encoded, so a NUL survives as \u0000).
func traversalAlert(name string, i int) []byte {
	body := map[string]any{
		"version": "4", "groupKey": "{}:{}", "status": "firing", "receiver": "autocapture",
		"alerts": []map[string]any{{
			"status": "firing", "labels": map[string]string{"alertname": name, "team": "traversal", "instance": "127.0.0.1:1"},
			"annotations": map[string]string{}, "startsAt": time.Now().Add(-time.Minute).UTC().Format(time.RFC3339Nano),
			"endsAt": "0001-01-01T00:00:00Z", "fingerprint": fmt.Sprintf("7a7a%012x", i),
		}},
	}
	b, _ := json.Marshal(body)
	return b
}

// checkTraversalKey fails unless key is a valid key of segments layout
// (8 for an artifact, 6 for a manifest), its alertname one safe segment.
func checkTraversalKey(t *testing.T, where, key string) {
	t.Helper()
	if err := storage.ValidKey(key); err != nil {
		t.Errorf("%s: %v", where, err)
		return
	}
	segs := strings.Split(key, "/")
	want := 8
	if strings.HasSuffix(key, "/manifest.json") {
		want = 6
	}
	if len(segs) != want {
		t.Errorf("%s: key %q has %d segments, want %d", where, key, len(segs), want)
	}
	for _, s := range segs {
		if strings.HasPrefix(s, ".") || len(s) > 128 {
			t.Errorf("%s: key %q has segment %q", where, key, s)
		}
	}
}

func TestServeHostileAlertnamesStayInTheStore(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"local", "s3"} {
		t.Run(backend, func(t *testing.T) {
			target := &slowTarget{hits: map[string]int{}, slowHit: make(chan struct{}, 64)}
			web := httptest.NewServer(target)
			defer web.Close()
			parent := t.TempDir()
			if err := os.Mkdir(filepath.Join(parent, "store"), 0o755); err != nil {
				t.Fatal(err)
			}
			o := &daemonOpts{Dir: filepath.Join(parent, "store"), Token: "traversal", Playbooks: fmt.Sprintf(`playbooks:
  - name: traversal
    match:
      - team="traversal"
    steps:
      - id: fast
        http: {url: "%s/fast"}
`, web.URL)}
			const prefix = "prod/autocapture"
			var srv *testenv.S3Server
			if backend == "s3" {
				srv = testenv.StartVersityGW(t)
				o.Storage = s3Storage(srv, prefix, "gzip", writeSecret(t, srv.SecretAccessKey))
			}
			d := startDaemon(t, o)
			var ids []string
			refused := 0
			for i, name := range traversalNames {
				code, b := d.post(t, traversalAlert(name, i))
				switch {
				case code == 200 && runID(b) != "":
					ids = append(ids, runID(b))
				case code >= 400 && code < 500:
					refused++
					t.Logf("alertname %.40q refused: %d %s", name, code, b)
				default:
					t.Errorf("alertname %.40q: %d %s", name, code, b)
				}
			}
			if len(ids) == 0 {
				t.Fatal("every alert was refused: the keys went untested")
			}
			artifacts := 0
			for _, id := range ids {
				r := waitFinished(t, d, id)
				if r.Status != vocab.StatusSucceeded {
					t.Errorf("run %s (alertname %.40q): %s, want succeeded: %+v", id, r.Alertname, r.Status, r)
				}
				for _, st := range r.Steps {
					for _, a := range st.Artifacts {
						artifacts++
						checkTraversalKey(t, "run "+id, a.Key)
					}
				}
				waitFor(t, 30*time.Second, "run "+id+"'s manifest", func() bool { return d.run(t, id).Manifest != "" })
				checkTraversalKey(t, "run "+id+" manifest", d.run(t, id).Manifest)
			}

			// What the store holds, seen from outside the daemon.
			stored := 0
			if backend == "local" {
				err := filepath.WalkDir(parent, func(p string, e fs.DirEntry, err error) error {
					if err != nil {
						return err
					}
					rel, _ := filepath.Rel(parent, p)
					rel = filepath.ToSlash(rel)
					if rel != "." && rel != "store" && !strings.HasPrefix(rel, "store/") {
						t.Errorf("%s is beside storage.path", rel)
					}
					if key, ok := strings.CutPrefix(rel, "store/artifacts/"); ok && !e.IsDir() && !strings.HasPrefix(key, ".") {
						stored++
						checkTraversalKey(t, "file", key)
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			} else {
				pager := s3.NewListObjectsV2Paginator(srv.Client(), &s3.ListObjectsV2Input{Bucket: aws.String(srv.Bucket)})
				for pager.HasMorePages() {
					page, err := pager.NextPage(context.Background())
					if err != nil {
						t.Fatal(err)
					}
					for _, obj := range page.Contents {
						stored++
						key, ok := strings.CutPrefix(aws.ToString(obj.Key), prefix+"/")
						if !ok {
							t.Errorf("object %q outside the prefix %s", aws.ToString(obj.Key), prefix)
							continue
						}
						checkTraversalKey(t, "object", key)
					}
				}
			}
			if want := artifacts + len(ids); stored != want {
				t.Errorf("%d objects stored, want %d (%d artifacts and %d manifests)", stored, want, artifacts, len(ids))
			}
			t.Logf("%s: %d hostile alertnames: %d refused, %d runs, %d objects stored, all inside the store",
				backend, len(traversalNames), refused, len(ids), stored)
		})
	}
}
