package artifacts

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"go.uber.org/zap/zaptest"

	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vocab"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// testLease is the runs' lease of the runner's tests (the manifest sweep's
// threshold derives from it).
const testLease = 2 * time.Second

// harness is one process's Keeper on a store: its own pool, its own River
// client over the Keeper's workers and queues, and a stand-in for the run
// lifecycle (lifeRuns) that reads the runs' rows and records what it is told.
type harness struct {
	k      *Keeper
	db     *sql.DB
	tables database.Tables
	client *river.Client[*sql.Tx]
	runs   *lifeRuns
	store  vocab.Store // the artifacts' (nil: none)
}

// newHarness opens (and migrates) db for one process whose artifacts go to
// st; opts adjust the Keeper's Deps; start: its River client and spool
// scans run.
func newHarness(t *testing.T, db testenv.DB, st vocab.Store, start bool, opts ...func(*Deps)) *harness {
	t.Helper()
	ctx := context.Background()
	raw, d, drv, err := database.Open(db.URL, db.Path)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { raw.Close() })
	if err := database.Migrate(ctx, raw, d, drv); err != nil {
		t.Fatalf("migrate store: %v", err)
	}
	h := &harness{db: raw, tables: database.NewTables(d), store: st}
	h.runs = &lifeRuns{h: h, done: map[string]int{}}
	owner := fmt.Sprintf("r0/%d/test", time.Now().UnixNano())
	deps := Deps{Store: func() Store { return raw }, Tables: h.tables, Client: func() *river.Client[*sql.Tx] { return h.client },
		Replica: "r0", Owner: owner, Now: time.Now, Runs: h.runs,
		Log: zaptest.NewLogger(t)}
	if st != nil {
		deps.Env = &vocab.Env{Store: st}
	}
	for _, f := range opts {
		f(&deps)
	}
	h.k = New(deps)
	h.k.HookSpool()
	workers := river.NewWorkers()
	if err := h.k.AddWorkers(workers); err != nil {
		t.Fatal(err)
	}
	h.client, err = river.NewClient(drv, &river.Config{ID: owner, Queues: h.k.Queues(), Workers: workers,
		PeriodicJobs: h.k.PeriodicJobs(), JobTimeout: -1, FetchPollInterval: 100 * time.Millisecond,
		FetchCooldown: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("river client: %v", err)
	}
	t.Cleanup(h.stop)
	if start {
		if err := h.client.Start(ctx); err != nil {
			t.Fatalf("start river: %v", err)
		}
		h.k.Start()
	}
	return h
}

// stop ends the Keeper's loops and its River client.
func (h *harness) stop() {
	h.k.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = h.client.StopAndCancel(ctx)
}

// withSpool has the Keeper's artifacts go through sp, with late uploads.
func withSpool(sp *storage.Spool) func(*Deps) {
	return func(d *Deps) {
		d.Env, d.Spool, d.UploadBackoff = &vocab.Env{Store: sp}, sp, 50*time.Millisecond
	}
}

// addRun inserts run id created at created with status; a status other than
// queued or running is a finished run (finished now).
func (h *harness) addRun(t *testing.T, id string, status vocab.Status, created time.Time) {
	t.Helper()
	ctx := context.Background()
	ms := created.UnixMilli()
	if _, err := h.tables.Runs.Insert(ctx, h.db, []database.NewRun{{ID: id, Key: id, Fingerprint: id, Alertname: "VLLMSlowTTFT",
		Alert: "{}", StartsAt: ms, Status: status, CreatedAt: ms, QueuedAt: ms}}); err != nil {
		t.Fatalf("insert run %s: %v", id, err)
	}
	if status != vocab.StatusQueued && status != vocab.StatusRunning {
		if _, err := h.db.ExecContext(ctx, `UPDATE autocapture_runs SET started_at = $1, finished_at = $2 WHERE id = $3`,
			ms, time.Now().UnixMilli(), id); err != nil {
			t.Fatal(err)
		}
	}
}

// artifactKey is where step step of run id puts file, as capture's steps do.
func artifactKey(id string, created time.Time, step, file string) string {
	return storage.ArtifactKey(storage.ArtifactPath{Started: created.UTC(), Alertname: "VLLMSlowTTFT", RunID: id, Plan: "pb",
		Step: step, File: file})
}

// putStep stores body as step's artifact file and records the step with it
// (summary "stored"); the record.
func (h *harness) putStep(t *testing.T, id string, created time.Time, step, file, body string) executor.StepRecord {
	t.Helper()
	obj, err := h.store.Put(context.Background(), artifactKey(id, created, step, file), strings.NewReader(body),
		vocab.ObjectMeta{ContentType: "text/plain"})
	if err != nil {
		t.Fatal(err)
	}
	rec := executor.StepRecord{Plan: "pb", ID: step, Kind: "test", Tier: vocab.TierMetrics, Status: vocab.StatusSucceeded,
		Summary: "stored", Artifacts: []vocab.Artifact{{Name: file, Key: obj.Key, ContentType: "text/plain", Size: obj.Size,
			SHA256: obj.SHA256}}}
	h.setStep(t, h.db, id, rec)
	return rec
}

// setStep writes rec as the step's record through q (a new row, or the
// row's record replaced).
func (h *harness) setStep(t *testing.T, q database.Querier, id string, rec executor.StepRecord) {
	t.Helper()
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := h.tables.Steps.Add(ctx, q, database.Step{RunID: id, Plan: rec.Plan, ID: rec.ID, Kind: rec.Kind,
		Status: rec.Status, Record: string(b)}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.ExecContext(ctx, `UPDATE autocapture_steps SET record = $1 WHERE run_id = $2 AND step_id = $3`,
		string(b), id, rec.ID); err != nil {
		t.Fatal(err)
	}
}

// finishWithManifest ends run id (status succeeded) and asks for its
// manifest in the same transaction, as the run lifecycle's finish does.
func (h *harness) finishWithManifest(t *testing.T, id string) {
	t.Helper()
	ctx := context.Background()
	tx, err := h.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE autocapture_runs SET status = 'succeeded', finished_at = $1 WHERE id = $2`,
		time.Now().UnixMilli(), id); err != nil {
		t.Fatal(err)
	}
	if err := h.k.EnqueueManifestTx(ctx, tx, id); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// finishedRun is run id, created at created, whose step grab stored body
// as out.txt, finished with its manifest asked for; the step's record.
func (h *harness) finishedRun(t *testing.T, id string, created time.Time, body string) executor.StepRecord {
	t.Helper()
	h.addRun(t, id, "running", created)
	rec := h.putStep(t, id, created, "grab", "out.txt", body)
	h.finishWithManifest(t, id)
	return rec
}

// manifestKey is the manifest key run id's row records ("" none yet).
func (h *harness) manifestKey(t *testing.T, id string) string {
	t.Helper()
	r, err := h.tables.Runs.Get(context.Background(), h.db, id)
	if err != nil {
		t.Fatalf("run %s: %v", id, err)
	}
	return r.ManifestKey.String
}

// waitManifest waits (a hang guard, not a timing assertion) until run id's
// row records its manifest, and returns the key.
func (h *harness) waitManifest(t *testing.T, id string) string {
	t.Helper()
	var key string
	waitFor(t, "run "+id+"'s manifest", func() bool {
		key = h.manifestKey(t, id)
		return key != ""
	})
	return key
}

// manifestOf reads the manifest under key from st.
func manifestOf(t *testing.T, st vocab.Store, key string) Manifest {
	t.Helper()
	rc, err := st.Open(context.Background(), key)
	if err != nil {
		t.Fatalf("open manifest %s: %v", key, err)
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("manifest %s: %v\n%s", key, err, b)
	}
	return m
}

// waitFor polls cond every 20 ms (a hang guard of 60 s, not a timing
// assertion).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lifeRuns stands in for the run lifecycle: a finished run's manifest says
// its row and its steps' records (one playbook, pb); UploadsDone counts the
// uploads each run was told landed.
type lifeRuns struct {
	h    *harness
	mu   sync.Mutex
	done map[string]int
}

func (r *lifeRuns) ManifestOf(ctx context.Context, runID string) (ManifestInput, bool, error) {
	row, err := r.h.tables.Runs.Get(ctx, r.h.db, runID)
	if err == sql.ErrNoRows || err == nil && !row.FinishedAt.Valid {
		return ManifestInput{}, false, nil
	} else if err != nil {
		return ManifestInput{}, false, err
	}
	raw, err := r.h.tables.Steps.Records(ctx, r.h.db, runID)
	if err != nil {
		return ManifestInput{}, false, err
	}
	in := ManifestInput{Alertname: row.Alertname, Plans: []ManifestPlan{{Stored: playbooks.StoredPlan{Playbook: "pb"}}},
		Run:   ManifestRun{ID: row.ID, Key: row.Key, Status: row.Status, CreatedAt: time.UnixMilli(row.CreatedAt).UTC()},
		Alert: ManifestAlert{Fingerprint: row.Fingerprint, Labels: map[string]string{"alertname": row.Alertname}}}
	for _, s := range raw {
		var rec executor.StepRecord
		if err := json.Unmarshal([]byte(s), &rec); err != nil {
			return ManifestInput{}, false, err
		}
		in.Records = append(in.Records, rec)
	}
	return in, true, nil
}

func (r *lifeRuns) UploadsDone(_ context.Context, _ *sql.Tx, runID string, n int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done[runID] += n
	return nil
}

// uploadsDone is how many uploads run id was told landed.
func (r *lifeRuns) uploadsDone(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.done[id]
}

func newLocalStore(t *testing.T) *storage.Local {
	t.Helper()
	l, err := storage.NewLocal(t.TempDir(), storage.WithLocalCompression(storage.CompressionNone))
	if err != nil {
		t.Fatal(err)
	}
	return l
}
