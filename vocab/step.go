package vocab

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/alertmanager/template"
	"go.uber.org/zap"
)

// Step is one capture action, built from its kind's config for one run.
type Step interface {
	Run(ctx context.Context, in *Input) (*Result, error)
}

// Input is everything a step may read: the alert, its window, what earlier steps
// found, and the outside world it may talk to (through Env).
type Input struct {
	RunID string
	// Plan is the playbook the step belongs to: two plans of one run may
	// have steps of the same id.
	Plan   string
	StepID string
	// Attempt is the run's attempt (1 on the first start): a step re-run
	// after a resume stores its artifacts apart from the interrupted one's.
	Attempt int
	// RunCreated is when the run was accepted: its date names the artifacts'
	// folder (storage.ArtifactKey), the same on every attempt.
	RunCreated time.Time
	Alert      template.Alert
	Window     Window
	// Prior holds the results of steps that finished earlier in this run, by step id.
	// Read-only: steps of one tier run in parallel and share it.
	Prior map[string]*Result
	// Missed says, of the earlier steps that finished with no evidence
	// (failed, not configured), what happened, by step id: the triage
	// names them when nothing was measured.
	Missed map[string]string
	Env    *Env
	Log    *zap.Logger
}

// Window is the stretch of time an alert is about: from its start minus a lookback
// to the moment the alert arrived (the run was accepted), however long the run
// then waited for a worker: instant queries are evaluated at End.
type Window struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

// AlertWindow is an alert's window: from its start minus lookback to end (when
// the alert arrived: the run's acceptance). The runner, replay and playtest
// all end it there, so a dry run shows the window a real run would query.
func AlertWindow(startsAt time.Time, lookback time.Duration, end time.Time) Window {
	return Window{Start: startsAt.Add(-lookback), End: end}
}

// Env is the outside world, injected by the runner. Nil fields mean "not configured";
// a step that needs one returns an error with ReasonBadConfig.
type Env struct {
	// Store receives artifacts; keys are made with ArtifactKey.
	Store Store
	// Targets is the HTTP client for addresses taken from alert labels: every
	// connection and redirect is checked against the allow-list at dial time.
	Targets *http.Client
	// Prometheus is the configured Prometheus (trusted, from config).
	Prometheus *Endpoint
	// Traces is the configured trace backend (trusted, from config).
	Traces *TracesEndpoint
	// Profiles guards framed profiles (tier 3) across replicas; nil: the
	// profile step fails with ReasonBadConfig.
	Profiles ProfileGuard
	// Profiling is the daemon's tier-3 policy.
	Profiling Profiling
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Endpoint is a configured HTTP service.
type Endpoint struct {
	URL     string
	Client  *http.Client
	Timeout time.Duration
	// Default: URL is the built-in default, not one the operator set. Nothing
	// listening there means no such service was set up (a step is not
	// configured), not that one failed.
	Default bool
}

// TracesEndpoint is the configured trace backend.
type TracesEndpoint struct {
	Endpoint
	Backend string // "jaeger" or "tempo"
	Service string // service.name of the vLLM spans
}

// Result is what a step reports: one summary line for the thread, findings that
// later `when` expressions and triage read, and the artifacts it stored.
type Result struct {
	// Summary is one line a human reads in the thread.
	Summary string `json:"summary"`
	// Findings are visible to `when` expressions as steps.<id>.<key>; JSON values only.
	Findings map[string]any `json:"findings,omitempty"`
	// Signals are canonical vLLM signals (see signals.go) for triage.
	Signals Signals `json:"signals,omitempty"`
	// Artifacts are the objects this step stored.
	Artifacts []Artifact `json:"artifacts,omitempty"`
	// Verdict is set by the triage step only.
	Verdict *Verdict `json:"verdict,omitempty"`
	// Profile is set by a profile step whose traces were read: the finding
	// that refines the run's verdict.
	Profile *ProfileFinding `json:"profile,omitempty"`
}

// Artifact is one stored object.
type Artifact struct {
	Name        string `json:"name"`
	Key         string `json:"key"`
	ContentType string `json:"content_type"`
	Size        int64  `json:"size"`
	SHA256      string `json:"sha256"`
	// Pending: the store was unavailable and the bytes wait in this replica's
	// spool for their upload under Key (storage.Spool); Size and SHA256 are
	// already those of the object to be stored.
	Pending bool `json:"pending,omitempty"`
}
