package artifacts

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

// manifestWorkers bounds manifests written at once by this process.
const manifestWorkers = 2

// manifestMaxAttempts: River's backoff (attempt⁴ seconds) makes 12 attempts
// about 11 hours, long enough to outlast a storage outage.
const manifestMaxAttempts = 12

// manifestRewrites bounds how often one job rebuilds a manifest whose run
// keeps changing under it.
const manifestRewrites = 5

// ManifestKind names the manifest job's kind in River's table.
const ManifestKind = "autocapture_manifest"

// manifestArgs is the job that writes (or rewrites) a run's manifest.
type manifestArgs struct {
	RunID string `json:"run_id"`
}

// Kind names the job kind in River's table.
func (manifestArgs) Kind() string { return ManifestKind }

// InsertOpts puts manifests on their own queue, so a slow store never holds
// up runs or deliveries. Not unique: a request while a write is running must
// not be dropped (River's uniqueness covers running jobs); duplicates write
// the same bytes.
func (manifestArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: Queue, MaxAttempts: manifestMaxAttempts}
}

type manifestWorker struct {
	river.WorkerDefaults[manifestArgs]
	k *Keeper
}

func (w *manifestWorker) Timeout(*river.Job[manifestArgs]) time.Duration { return 5 * time.Minute }

func (w *manifestWorker) Work(ctx context.Context, job *river.Job[manifestArgs]) error {
	return w.k.WriteManifest(ctx, job.Args.RunID)
}

// EnqueueManifestTx asks, in tx, for the run's manifest to be (re)written
// once tx commits: at the finish, and whenever what it describes changes
// afterwards (a late upload landed). A tx that rolls back asks for nothing.
func (k *Keeper) EnqueueManifestTx(ctx context.Context, tx *sql.Tx, runID string) error {
	if err := k.tables.Runs.BumpManifest(ctx, tx, runID); err != nil {
		return fmt.Errorf("runner: manifest of %s: %w", runID, err)
	}
	if _, err := k.client().InsertTx(ctx, tx, manifestArgs{RunID: runID}, nil); err != nil {
		return fmt.Errorf("runner: manifest of %s: enqueue: %w", runID, err)
	}
	return nil
}

// WriteManifest builds the run's manifest and puts it, again while the run's
// manifest_seq moved under it. A run that is gone (retention), not to be
// written (Runs.ManifestOf) or without a store to write to is done.
func (k *Keeper) WriteManifest(ctx context.Context, runID string) error {
	st := k.store()
	if st == nil {
		return nil
	}
	for range manifestRewrites {
		seq, err := k.tables.Runs.ManifestSeq(ctx, k.db(), runID)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		} else if err != nil {
			return fmt.Errorf("runner: manifest of %s: %w", runID, err)
		}
		in, ok, err := k.d.Runs.ManifestOf(ctx, runID)
		if err != nil || !ok {
			return err
		}
		m, err := BuildManifest(ctx, in, st)
		if err != nil {
			return err
		}
		m.Verdicts = in.Verdicts
		b, err := m.Encode()
		if err != nil {
			return fmt.Errorf("runner: manifest of %s: %w", runID, err)
		}
		key := storage.ManifestKey(in.Run.CreatedAt, in.Alertname, in.Run.ID)
		if _, err := st.Put(ctx, key, bytes.NewReader(b), vocab.ObjectMeta{ContentType: "application/json", Replace: true}); err != nil {
			return fmt.Errorf("runner: manifest of %s: %w", runID, err)
		}
		now, err := k.tables.Runs.SetManifest(ctx, k.db(), runID, key)
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
	k.log.Warn("A run's manifest kept changing while it was written; a later request writes it again.", zap.String("run", runID))
	return nil
}

// ManifestInput is what a manifest says of its run, from the run lifecycle.
type ManifestInput struct {
	// Run and Alert are the run's, as the manifest writes them.
	Run       ManifestRun
	Alert     ManifestAlert
	Alertname string
	Verdict   *vocab.Verdict
	// Verdicts is the run's verdict history, oldest first (WriteManifest
	// writes it; BuildManifest leaves it empty).
	Verdicts []runs.VerdictEntry
	// Plans are the run's stored plans, each with its steps rebuilt (with
	// their rendered configs; none when it could not be rebuilt).
	Plans []ManifestPlan
	// Records are the run's step records.
	Records []executor.StepRecord
}

// ManifestPlan is one of the run's stored plans with its rebuilt steps.
type ManifestPlan struct {
	Stored  playbooks.StoredPlan
	Planned []playbooks.PlannedStep
}

// Manifest is the schema of manifest.json. Field order is the file's;
// maps are written sorted (encoding/json), so the same run gives the same
// bytes.
type Manifest struct {
	Schema   int              `json:"schema"`
	Run      ManifestRun      `json:"run"`
	Alert    ManifestAlert    `json:"alert"`
	Versions ManifestVersions `json:"versions"`
	Verdict  *vocab.Verdict   `json:"verdict"`
	// Verdicts is the run's verdict history, oldest first, as the runs API
	// gives it: the preliminary verdict the thread showed first and the
	// refined one, with what each read and what changed.
	Verdicts  []runs.VerdictEntry `json:"verdicts"`
	Playbooks []manifestPlaybook  `json:"playbooks"`
}

// ManifestRun is the run as its manifest says it.
type ManifestRun struct {
	ID          string       `json:"id"`
	Key         string       `json:"key"`
	Status      vocab.Status `json:"status"`
	Reason      string       `json:"reason,omitempty"`
	CreatedAt   time.Time    `json:"created_at"`
	StartedAt   *time.Time   `json:"started_at"`
	FinishedAt  *time.Time   `json:"finished_at"`
	ResolvedAt  *time.Time   `json:"resolved_at"`
	Attempts    int          `json:"attempts"`
	Resumed     int          `json:"resumed"`
	WindowStart *time.Time   `json:"window_start,omitempty"`
	WindowEnd   *time.Time   `json:"window_end,omitempty"`
}

// ManifestAlert is the run's alert as its manifest says it.
type ManifestAlert struct {
	Fingerprint  string            `json:"fingerprint"`
	StartsAt     time.Time         `json:"starts_at"`
	GeneratorURL string            `json:"generator_url,omitempty"`
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations"`
}

// ManifestVersions: autocapture's from its build info; the target's (vLLM)
// when a step found it (an http step of /version), else left out.
type ManifestVersions struct {
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
	Status     vocab.Status       `json:"status"`
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
const statusNotRun vocab.Status = "not_run"

// BuildManifest assembles the manifest of in: its plans' rebuilt steps (for
// the rendered configs) with the run's records, and the store st (for the
// artifacts' encodings).
func BuildManifest(ctx context.Context, in ManifestInput, st vocab.Store) (*Manifest, error) {
	m := &Manifest{Schema: 1, Verdict: in.Verdict, Versions: BuildVersions(), Run: in.Run, Alert: in.Alert,
		Playbooks: []manifestPlaybook{}, Verdicts: []runs.VerdictEntry{}}
	m.Alert.Labels, m.Alert.Annotations = nonNil(m.Alert.Labels), nonNil(m.Alert.Annotations)
	recs := in.Records
	byPlan := map[string][]executor.StepRecord{}
	for _, rec := range recs {
		byPlan[rec.Plan] = append(byPlan[rec.Plan], rec)
	}
	for _, p := range in.Plans {
		sp := p.Stored
		pb := manifestPlaybook{Name: sp.Playbook, File: sp.File, Digest: sp.Digest, Steps: []manifestStep{}}
		done := map[string]bool{}
		for _, ps := range p.Planned {
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

// fillStep copies rec into ms and describes its artifacts from the store.
func fillStep(ctx context.Context, ms *manifestStep, rec executor.StepRecord, st vocab.Store) error {
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

// BuildVersions is autocapture's version from the binary's build info (the
// module version, or "(devel)" for a build from a checkout, and the VCS
// revision); tests replace it for a fixed golden file.
var BuildVersions = func() ManifestVersions {
	v := ManifestVersions{Autocapture: "unknown", Go: runtime.Version()}
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

// Encode is the manifest's bytes: indented JSON, HTML left unescaped, one
// trailing newline.
func (m *Manifest) Encode() ([]byte, error) {
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
