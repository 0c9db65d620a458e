package runner

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/riverqueue/river"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vocab"
)

// The manifest: one manifest.json per finished run, beside its plans'
// folders (storage.ManifestKey), saying what was captured and where: the
// alert, the playbooks with file and digest, every step with its rendered
// config, timings, outcome, findings and artifacts (key, size, sha256,
// content type and encoding), the verdict and its history, the run's status and times, and
// the versions of autocapture and of the target. It is what someone reading
// the bucket, without the daemon, starts from.
//
// It is written by a River job (manifestArgs, queue autocapture_background)
// inserted in the SAME transaction as the run's finish (enqueueManifestTx in
// finish): a kill -9 before that commit leaves an unfinished run and no job
// (the run resumes and finishes again); after it, both, and the job is worked
// by any live replica, whoever finished the run. The window that remains is
// between the manifest's Put and the job's completion: the job is then run
// again and writes the same bytes once more. A job whose worker died holds
// "running" in River's table until River's rescuer (an hour); the reaper
// does not wait for it: a manifest job running past max(30 s, 2 × lease)
// gets a fresh one (sweep.go), and duplicate writers are harmless under
// manifest_seq.
//
// The manifest is the only object ever rewritten (storage.Meta.Replace):
// late uploads (another helper's spool) call enqueueManifestTx when they land.
// Each request bumps autocapture_runs.manifest_seq; a writer reads the seq
// before the state it writes, and after its Put writes again while the seq
// moved, so the last Put for a run is of its latest state even when two
// replicas write at once.

// manifestWorkers bounds manifests written at once by this process.
const manifestWorkers = 2

// manifestMaxAttempts: River's backoff (attempt⁴ seconds) makes 12 attempts
// about 11 hours, long enough to outlast a storage outage.
const manifestMaxAttempts = 12

// manifestRewrites bounds how often one job rebuilds a manifest whose run
// keeps changing under it.
const manifestRewrites = 5

// manifestArgs is the job that writes (or rewrites) a run's manifest.
type manifestArgs struct {
	RunID string `json:"run_id"`
}

// Kind names the job kind in River's table.
func (manifestArgs) Kind() string { return "autocapture_manifest" }

// InsertOpts puts manifests on their own queue, so a slow store never holds
// up runs or deliveries. Not unique: a request while a write is running must
// not be dropped (River's uniqueness covers running jobs); duplicates write
// the same bytes.
func (manifestArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: queueBackground, MaxAttempts: manifestMaxAttempts}
}

type manifestWorker struct {
	river.WorkerDefaults[manifestArgs]
	s *Service
}

func (w *manifestWorker) Timeout(*river.Job[manifestArgs]) time.Duration { return 5 * time.Minute }

func (w *manifestWorker) Work(ctx context.Context, job *river.Job[manifestArgs]) error {
	return w.s.writeManifest(ctx, job.Args.RunID)
}

// enqueueManifestTx asks, in tx, for the run's manifest to be (re)written
// once tx commits: at the finish, and whenever what it describes changes
// afterwards (a late upload landed). A tx that rolls back asks for nothing.
func (s *Service) enqueueManifestTx(ctx context.Context, tx *sql.Tx, runID string) error {
	if err := s.tables.Runs.BumpManifest(ctx, tx, runID); err != nil {
		return fmt.Errorf("runner: manifest of %s: %w", runID, err)
	}
	if _, err := s.client.InsertTx(ctx, tx, manifestArgs{RunID: runID}, nil); err != nil {
		return fmt.Errorf("runner: manifest of %s: enqueue: %w", runID, err)
	}
	return nil
}

// writeManifest builds the run's manifest from the store and puts it,
// again while the run's manifest_seq moved under it. A run that is gone
// (retention) or has no store to write to is done.
func (s *Service) writeManifest(ctx context.Context, runID string) error {
	st := s.artifactStore()
	if st == nil {
		return nil
	}
	for range manifestRewrites {
		seq, err := s.tables.Runs.ManifestSeq(ctx, s.db, runID)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		} else if err != nil {
			return fmt.Errorf("runner: manifest of %s: %w", runID, err)
		}
		r, err := s.getRow(ctx, s.db, runID)
		if errors.Is(err, runs.ErrNotFound) {
			return nil
		} else if err != nil {
			return err
		}
		if !finished(r.Status) {
			return nil // asked for by a finish that was not committed as such
		}
		if len(r.plans) == 0 {
			return nil // skipped before any playbook ran: nothing was captured
		}
		steps, err := s.loadSteps(ctx, s.db, runID)
		if err != nil {
			return err
		}
		verdicts, err := s.loadVerdicts(ctx, s.db, runID)
		if err != nil {
			return err
		}
		m, err := s.buildManifest(ctx, r, steps, st)
		if err != nil {
			return err
		}
		m.Verdicts = verdicts
		b, err := m.encode()
		if err != nil {
			return fmt.Errorf("runner: manifest of %s: %w", runID, err)
		}
		key := storage.ManifestKey(r.CreatedAt, r.Alertname, r.ID)
		if _, err := st.Put(ctx, key, bytes.NewReader(b), storage.Meta{ContentType: "application/json", Replace: true}); err != nil {
			return fmt.Errorf("runner: manifest of %s: %w", runID, err)
		}
		now, err := s.tables.Runs.SetManifest(ctx, s.db, runID, key)
		if errors.Is(err, sql.ErrNoRows) {
			// Retention deleted the run while this was written: take the
			// manifest back, or it would outlive the run in the store.
			return st.Delete(ctx, key)
		} else if err != nil {
			return fmt.Errorf("runner: manifest of %s: record key: %w", runID, err)
		}
		if now == seq {
			return nil
		}
	}
	s.log.Warn("A run's manifest kept changing while it was written; a later request writes it again.", zap.String("run", runID))
	return nil
}

// artifactStore is where artifacts (and manifests) go; nil without one.
func (s *Service) artifactStore() storage.Store {
	if s.o.Env == nil {
		return nil
	}
	return s.o.Env.Store
}

// Manifest is the schema of manifest.json. Field order is the file's;
// maps are written sorted (encoding/json), so the same run gives the same
// bytes.
type Manifest struct {
	Schema   int              `json:"schema"`
	Run      manifestRun      `json:"run"`
	Alert    manifestAlert    `json:"alert"`
	Versions manifestVersions `json:"versions"`
	Verdict  *vocab.Verdict   `json:"verdict"`
	// Verdicts is the run's verdict history, oldest first, as the runs API
	// gives it: the preliminary verdict the thread showed first and the
	// refined one, with what each read and what changed.
	Verdicts  []runs.VerdictEntry `json:"verdicts"`
	Playbooks []manifestPlaybook  `json:"playbooks"`
}

type manifestRun struct {
	ID          string     `json:"id"`
	Key         string     `json:"key"`
	Status      string     `json:"status"`
	Reason      string     `json:"reason,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
	StartedAt   *time.Time `json:"started_at"`
	FinishedAt  *time.Time `json:"finished_at"`
	ResolvedAt  *time.Time `json:"resolved_at"`
	Attempts    int        `json:"attempts"`
	Resumed     int        `json:"resumed"`
	WindowStart *time.Time `json:"window_start,omitempty"`
	WindowEnd   *time.Time `json:"window_end,omitempty"`
}

type manifestAlert struct {
	Fingerprint  string            `json:"fingerprint"`
	StartsAt     time.Time         `json:"starts_at"`
	GeneratorURL string            `json:"generator_url,omitempty"`
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations"`
}

// manifestVersions: autocapture's from its build info; the target's (vLLM)
// when a step found it (an http step of /version), else left out.
type manifestVersions struct {
	Autocapture         string `json:"autocapture"`
	AutocaptureRevision string `json:"autocapture_revision,omitempty"`
	Go                  string `json:"go"`
	Target              string `json:"target,omitempty"`
}

type manifestPlaybook struct {
	Name   string         `json:"name"`
	File   string         `json:"file"`
	Digest string         `json:"digest"`
	Steps  []manifestStep `json:"steps"`
}

// manifestStep is a step of the plan, with its record when it has one (a
// step that never ran, after a failed tier or a cancel, has status not_run).
type manifestStep struct {
	ID         string             `json:"id"`
	Kind       string             `json:"kind"`
	Tier       vocab.Tier         `json:"tier"`
	Config     any                `json:"config,omitempty"`
	Status     string             `json:"status"`
	Reason     string             `json:"reason,omitempty"`
	Error      string             `json:"error,omitempty"`
	Partial    bool               `json:"partial,omitempty"`
	Summary    string             `json:"summary,omitempty"`
	StartedAt  *time.Time         `json:"started_at,omitempty"`
	FinishedAt *time.Time         `json:"finished_at,omitempty"`
	DurationMS int64              `json:"duration_ms"`
	Findings   map[string]any     `json:"findings,omitempty"`
	Signals    vocab.Signals      `json:"signals,omitempty"`
	Artifacts  []manifestArtifact `json:"artifacts"`
}

// manifestArtifact is a stored object as the store describes it now (Stat):
// Size and SHA256 of the stored bytes, the encoding and the original's when
// the store compressed it. Missing: the record names it but the store has no
// such object (an upload still waiting, or gone).
type manifestArtifact struct {
	Name            string `json:"name"`
	Key             string `json:"key"`
	Size            int64  `json:"size"`
	SHA256          string `json:"sha256"`
	ContentType     string `json:"content_type"`
	ContentEncoding string `json:"content_encoding,omitempty"`
	OriginalSize    int64  `json:"original_size,omitempty"`
	OriginalSHA256  string `json:"original_sha256,omitempty"`
	Missing         bool   `json:"missing,omitempty"`
	// Pending: stored in a replica's spool, its upload still to come (the
	// manifest is rewritten when it lands).
	Pending bool `json:"pending,omitempty"`
}

// statusNotRun marks a planned step without a record in the manifest.
const statusNotRun = "not_run"

// buildManifest assembles the manifest of r from its steps, the plans
// rebuilt from their stored source (for the rendered configs) and the store
// (for the artifacts' encodings).
func (s *Service) buildManifest(ctx context.Context, r *runRow, recs []executor.StepRecord, st storage.Store) (*Manifest, error) {
	m := &Manifest{Schema: 1, Verdict: r.Verdict, Versions: buildVersions(),
		Run: manifestRun{ID: r.ID, Key: r.Key, Status: r.Status, Reason: r.Reason, CreatedAt: r.CreatedAt,
			StartedAt: r.StartedAt, FinishedAt: r.FinishedAt, ResolvedAt: r.ResolvedAt, Attempts: r.Attempts, Resumed: r.Resumed},
		Alert: manifestAlert{Fingerprint: r.Fingerprint, StartsAt: r.StartsAt, GeneratorURL: r.alert.GeneratorURL,
			Labels: nonNil(r.Labels), Annotations: nonNil(r.Annotations)},
		Playbooks: []manifestPlaybook{}, Verdicts: []runs.VerdictEntry{}}
	if r.window != nil {
		m.Run.WindowStart, m.Run.WindowEnd = &r.window.Start, &r.window.End
	}
	byPlan := map[string][]executor.StepRecord{}
	for _, rec := range recs {
		byPlan[rec.Plan] = append(byPlan[rec.Plan], rec)
	}
	for _, sp := range r.plans {
		pb := manifestPlaybook{Name: sp.Playbook, File: sp.File, Digest: sp.Digest, Steps: []manifestStep{}}
		planned := s.rebuiltSteps(r, sp)
		done := map[string]bool{}
		for _, ps := range planned {
			ms := manifestStep{ID: ps.ID, Kind: ps.Kind, Tier: ps.Tier, Config: ps.Config, Status: statusNotRun,
				Artifacts: []manifestArtifact{}}
			if i := slices.IndexFunc(byPlan[sp.Playbook], func(rec executor.StepRecord) bool { return rec.ID == ps.ID }); i >= 0 {
				if err := fillStep(ctx, &ms, byPlan[sp.Playbook][i], st); err != nil {
					return nil, err
				}
			}
			done[ps.ID] = true
			pb.Steps = append(pb.Steps, ms)
		}
		// Records the rebuilt plan does not name (it could not be rebuilt):
		// by tier and id, so the order does not depend on timings.
		rest := slices.DeleteFunc(slices.Clone(byPlan[sp.Playbook]), func(rec executor.StepRecord) bool { return done[rec.ID] })
		slices.SortFunc(rest, func(a, b executor.StepRecord) int {
			if a.Tier != b.Tier {
				return int(a.Tier) - int(b.Tier)
			}
			return strings.Compare(a.ID, b.ID)
		})
		for _, rec := range rest {
			ms := manifestStep{ID: rec.ID, Kind: rec.Kind, Tier: rec.Tier}
			if err := fillStep(ctx, &ms, rec, st); err != nil {
				return nil, err
			}
			pb.Steps = append(pb.Steps, ms)
		}
		m.Playbooks = append(m.Playbooks, pb)
	}
	m.Versions.Target = targetVersion(recs)
	return m, nil
}

// rebuiltSteps are the plan's steps with their rendered configs, rebuilt from
// the stored source the run ran; none when it cannot be rebuilt.
func (s *Service) rebuiltSteps(r *runRow, sp playbooks.StoredPlan) []playbooks.PlannedStep {
	w := vocab.Window{}
	if r.window != nil {
		w = *r.window
	}
	p, err := s.o.Planner.Rebuild(sp, r.alert, w)
	if err != nil {
		s.log.Warn("Manifest: a run's plan cannot be rebuilt; its steps are listed without config.",
			zap.String("run", r.ID), zap.String("playbook", sp.Playbook), zap.Error(err))
		return nil
	}
	return p.Steps
}

// fillStep copies rec into ms and describes its artifacts from the store.
func fillStep(ctx context.Context, ms *manifestStep, rec executor.StepRecord, st storage.Store) error {
	ms.Status, ms.Reason, ms.Error, ms.Partial, ms.Summary = rec.Status, rec.Reason, rec.Error, rec.Partial, rec.Summary
	if !rec.StartedAt.IsZero() {
		ms.StartedAt = &rec.StartedAt
	}
	if !rec.FinishedAt.IsZero() {
		ms.FinishedAt = &rec.FinishedAt
	}
	ms.DurationMS, ms.Findings, ms.Signals = rec.DurationMS, rec.Findings, rec.Signals
	ms.Artifacts = make([]manifestArtifact, 0, len(rec.Artifacts))
	for _, a := range rec.Artifacts {
		ma := manifestArtifact{Name: a.Name, Key: a.Key, Size: a.Size, SHA256: a.SHA256, ContentType: a.ContentType}
		obj, err := st.Stat(ctx, a.Key)
		switch {
		case errors.Is(err, storage.ErrNotFound):
			ma.Missing = true
		case err != nil:
			return fmt.Errorf("runner: manifest: describe %s: %w", a.Key, err)
		default:
			ma.Size, ma.SHA256, ma.ContentEncoding = obj.Size, obj.SHA256, obj.ContentEncoding
			ma.OriginalSize, ma.OriginalSHA256 = obj.OriginalSize, obj.OriginalSHA256
			ma.Pending = obj.Pending
			if ma.ContentType == "" {
				ma.ContentType = obj.ContentType
			}
		}
		ms.Artifacts = append(ms.Artifacts, ma)
	}
	return nil
}

// targetVersion is vLLM's version as a step found it: the "version" field of
// a JSON body an http step fetched (vLLM's GET /version answers
// {"version": "0.11.0"}); "" when no step did.
func targetVersion(recs []executor.StepRecord) string {
	for _, rec := range recs {
		if rec.Kind != "http" || rec.Findings == nil {
			continue
		}
		if url, _ := rec.Findings["url"].(string); !strings.HasSuffix(strings.SplitN(url, "?", 2)[0], "/version") {
			continue
		}
		if j, ok := rec.Findings["json"].(map[string]any); ok {
			if v, ok := j["version"].(string); ok && v != "" {
				return v
			}
		}
	}
	return ""
}

// buildVersions is autocapture's version from the binary's build info (the
// module version, or "(devel)" for a build from a checkout, and the VCS
// revision); tests replace it for a fixed golden file.
var buildVersions = func() manifestVersions {
	v := manifestVersions{Autocapture: "unknown", Go: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	if bi.Main.Version != "" {
		v.Autocapture = bi.Main.Version
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev != "" && modified == "true" {
		rev += "+modified"
	}
	v.AutocaptureRevision = rev
	return v
}

// encode is the manifest's bytes: indented JSON, HTML left unescaped, one
// trailing newline.
func (m *Manifest) encode() ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(m); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
