package runner

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/handlers"
	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/artifacts"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vocab"
)

// storing is a step that stores body as its artifact name, the way capture's
// steps do (ArtifactKey, errors classified).
func storing(name string, body []byte) vocab.Step {
	return fakestep.Func(func(ctx context.Context, in *vocab.Input) (*vocab.Result, error) {
		key := storage.ArtifactKey(storage.ArtifactPath{Started: in.RunCreated, Alertname: in.Alert.Labels["alertname"],
			RunID: in.RunID, Plan: in.Plan, Step: in.StepID, File: name, Attempt: in.Attempt})
		obj, err := in.Env.Store.Put(ctx, key, bytes.NewReader(body), vocab.ObjectMeta{})
		if err != nil {
			return nil, &vocab.Error{Reason: vocab.Classify(err), Err: fmt.Errorf("store %s: %w", key, err)}
		}
		return &vocab.Result{Summary: "stored " + name, Artifacts: []vocab.Artifact{{Name: name, Key: obj.Key,
			ContentType: obj.ContentType, Size: obj.Size, SHA256: obj.SHA256}}}, nil
	})
}

func withEnv(e *vocab.Env) svcOpt { return func(o *Options) { o.Env = e } }

func newLocalStore(t *testing.T) *storage.Local {
	t.Helper()
	l, err := storage.NewLocal(t.TempDir(), storage.WithLocalCompression(storage.CompressionNone))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestMaxArtifactBytesCutsTheStepThatPassesIt: of a run's parallel steps,
// the one whose artifact would pass runs.max_artifact_bytes fails with
// too-large (its record says the cap and the run's total) and its object is
// gone; the others' artifacts are intact.
func TestMaxArtifactBytesCutsTheStepThatPassesIt(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		store := newLocalStore(t)
		small := bytes.Repeat([]byte("s"), 3000)
		big := bytes.Repeat([]byte("B"), 200_000)
		cfg := fastRuns()
		cfg.MaxArtifactBytes = 100_000
		s := newService(t, db, planner(
			func() playbooks.PlannedStep {
				return fakestep.Step("small", vocab.TierMetrics, storing("small.bin", small))
			},
			func() playbooks.PlannedStep {
				return fakestep.Step("big", vocab.TierMetrics, storing("big.bin", big))
			},
		), true, withEnv(&vocab.Env{Store: store}), func(o *Options) { o.Config = cfg })
		acc := acceptOne(t, s, firing("fp-cap", time.Now()))
		r := waitRun(t, s, acc.RunID, "finished", isFinished)
		bigRec, smallRec := stepByID(r, "big"), stepByID(r, "small")
		if bigRec.Status != "failed" || bigRec.Reason != string(vocab.ReasonTooLarge) ||
			!strings.Contains(bigRec.Error, "runs.max_artifact_bytes (97.7 KiB (100000 bytes))") || !strings.Contains(bigRec.Error, "has stored") {
			t.Fatalf("big: %s %s %q", bigRec.Status, bigRec.Reason, bigRec.Error)
		}
		if smallRec.Status != "succeeded" || len(smallRec.Artifacts) != 1 {
			t.Fatalf("small: %+v", smallRec)
		}
		ctx := context.Background()
		var keys []string
		if err := store.List(ctx, "", func(e vocab.ListEntry) error {
			if !strings.HasSuffix(e.Key, "/manifest.json") { // the run's manifest, written by its own job once the run ended
				keys = append(keys, e.Key)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if len(keys) != 1 || keys[0] != smallRec.Artifacts[0].Key {
			t.Fatalf("stored keys %v, want only %s", keys, smallRec.Artifacts[0].Key)
		}
		rc, err := store.Open(ctx, keys[0])
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		if !bytes.Equal(got, small) {
			t.Fatal("the small artifact is not intact")
		}
		if r.Status != vocab.StatusPartial {
			t.Fatalf("run %s, want partial", r.Status)
		}
	})
}

// TestThreadLinkResolvesThroughTheRoute: the link a step's reply carries,
// opened over plain HTTP against the daemon's route, gives the artifact's
// exact bytes; the same URL with the run id changed is refused.
func TestThreadLinkResolvesThroughTheRoute(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		store := newLocalStore(t)
		body := []byte(`{"queue":42,"kv":0.98}` + strings.Repeat(" ", 5000))
		srv := httptest.NewUnstartedServer(nil)
		base := "http://" + srv.Listener.Addr().String()
		n := &recNotifier{}
		s := newService(t, db, planner(
			func() playbooks.PlannedStep {
				return fakestep.Step("snapshot", vocab.TierMetrics, storing("prometheus.json", body))
			},
		), true, withEnv(&vocab.Env{Store: store}), notifyTo(n),
			func(o *Options) { o.Links = artifacts.ThreadLinks{BaseURL: base, TTL: time.Hour} })
		h, err := handlers.New(handlers.Options{Runs: s, Registry: prometheus.NewRegistry(), Log: zaptest.NewLogger(t),
			Auth:      config.Auth{BearerToken: "api-token"}, // a link needs no API credentials
			Artifacts: &handlers.ArtifactOptions{Runs: s, Store: store, Links: s.Signer()}})
		if err != nil {
			t.Fatal(err)
		}
		srv.Config.Handler = h
		srv.Start()
		defer srv.Close()
		acc := acceptOne(t, s, firing("fp-link", time.Now()))
		waitRun(t, s, acc.RunID, "finished", isFinished)
		var link notify.Link
		n.eventually(t, "the snapshot's link", func() bool {
			for _, r := range n.replies {
				if r.StepID == "snapshot" && len(r.Links) == 1 {
					link = r.Links[0]
					return true
				}
			}
			return false
		})
		if !strings.HasPrefix(link.URL, base+"/artifacts/"+acc.RunID+"/") || !strings.Contains(link.URL, "sig=") {
			t.Fatalf("link %q", link.URL)
		}
		res, err := http.Get(link.URL)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(res.Body)
		res.Body.Close()
		want := sha256.Sum256(body)
		if sum := sha256.Sum256(got); res.StatusCode != 200 || hex.EncodeToString(sum[:]) != hex.EncodeToString(want[:]) {
			t.Fatalf("%d, %d bytes: %.200s", res.StatusCode, len(got), got)
		}
		other := acceptOne(t, s, firing("fp-link-2", time.Now()))
		res, err = http.Get(strings.Replace(link.URL, "/artifacts/"+acc.RunID+"/", "/artifacts/"+other.RunID+"/", 1))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusForbidden {
			t.Fatalf("the link under another run: %d, want 403", res.StatusCode)
		}
		if ok, err := s.RunArtifact(context.Background(), acc.RunID, "2026/01/01/x/y/z.json"); ok || err != nil {
			t.Fatalf("an unrecorded key belongs to the run: %v %v", ok, err)
		}
		if _, err := s.RunArtifact(context.Background(), "no-such-run", "a"); !errors.Is(err, runs.ErrNotFound) {
			t.Fatalf("unknown run: %v", err)
		}
	})
}
