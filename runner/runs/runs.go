// Package runs is the run service's vocabulary, without the service: what a run
// is, what accepting an alert did, how runs are listed, and the errors callers
// act on. Package runner stores and executes runs in these terms; the HTTP
// surface (package handlers) serves them. It imports no database, so the
// surface and its tests need none.
package runs

import (
	"errors"
	"time"

	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/vocab"
)

// Errors the run service wraps so callers (the API) answer the right code.
var (
	// ErrNotFound: no run has that id.
	ErrNotFound = errors.New("runner: no such run")
	// ErrFinished: the run has already ended and cannot be cancelled.
	ErrFinished = errors.New("runner: run already finished")
	// ErrBadCursor: a List cursor that no page handed out.
	ErrBadCursor = errors.New("runner: bad cursor")
	// ErrBadFeedback: feedback that names no known verdict or no user.
	ErrBadFeedback = errors.New("runner: bad feedback")
)

// Outcome is what accepting one alert did.
type Outcome string

// Accept outcomes.
const (
	OutcomeAccepted        Outcome = "accepted"         // a new run was created
	OutcomeDeduplicated    Outcome = "deduplicated"     // the alert belongs to an existing run
	OutcomeResolved        Outcome = "resolved"         // the run's resolved_at is set
	OutcomeResolvedUnknown Outcome = "resolved_unknown" // resolved, and no run was known
)

// Outcomes lists every outcome of accepting an alert.
var Outcomes = []Outcome{OutcomeAccepted, OutcomeDeduplicated, OutcomeResolved, OutcomeResolvedUnknown}

// Accepted is the run service's answer for one accepted alert.
type Accepted struct {
	Fingerprint string  `json:"fingerprint"`
	RunID       string  `json:"run_id,omitempty"`
	Outcome     Outcome `json:"outcome"`
}

// PlaybookRef names a playbook a run executes.
type PlaybookRef struct {
	Name   string `json:"name"`
	File   string `json:"file"`
	Digest string `json:"digest"`
}

// Run is one firing episode of an alert and what was captured for it.
type Run struct {
	ID          string            `json:"id"`
	Key         string            `json:"key"`
	Fingerprint string            `json:"fingerprint"`
	Alertname   string            `json:"alertname"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	StartsAt    time.Time         `json:"starts_at"`
	// Status is one of vocab.RunStatuses.
	Status            vocab.Status   `json:"status"`
	Reason            string         `json:"reason,omitempty"`
	ResolvedAt        *time.Time     `json:"resolved_at"`
	CancelRequestedAt *time.Time     `json:"cancel_requested_at"`
	CreatedAt         time.Time      `json:"created_at"`
	StartedAt         *time.Time     `json:"started_at"`
	FinishedAt        *time.Time     `json:"finished_at"`
	Attempts          int            `json:"attempts"`
	Resumed           int            `json:"resumed"`
	Playbooks         []PlaybookRef  `json:"playbooks"`
	Verdict           *vocab.Verdict `json:"verdict"`
	// Manifest is the storage key of the run's manifest.json, once written
	// (shortly after the run finished; rewritten when late uploads land).
	Manifest string `json:"manifest,omitempty"`
	// Steps is filled by Get; List leaves it empty.
	Steps []executor.StepRecord `json:"steps"`
	// Feedback is what readers said of the verdict, oldest answer first;
	// filled by Get, List leaves it empty.
	Feedback []Feedback `json:"feedback"`
	// Actions are what people did from the run's thread (a silence in
	// Alertmanager, its end, a refused click), oldest first; filled by Get.
	Actions []Action `json:"actions"`
	// SeenBefore is how often the alert fired before on the run's instance
	// and model (notify.SeenBefore.Line); filled by Get, nil when never.
	SeenBefore *notify.SeenBefore `json:"seen_before,omitempty"`
	// Repeat is the earlier run of SeenBefore whose verdict the run's
	// repeats, with its key artifact; filled by Get, nil when none.
	Repeat *notify.Repeat `json:"repeat,omitempty"`
	// Verdicts is the run's verdict history, oldest first: preliminary ones
	// (reached over part of tier 1) and the refined one; filled by Get. The
	// latest is Verdict.
	Verdicts []VerdictEntry `json:"verdicts"`
	// Uploads are the run's artifacts that were kept in a replica's local
	// spool while the artifact store was unavailable, pending or uploaded
	// since; filled by Get, empty for a run that never spooled.
	Uploads []Upload `json:"uploads,omitempty"`
}

// Verdict kinds in a run's history.
const (
	// VerdictPreliminary: reached over part of tier 1 (the PromQL snapshot
	// while the scrape still ran).
	VerdictPreliminary = "preliminary"
	// VerdictRefined: the triage step's own result, over all of tier 1.
	VerdictRefined = "refined"
	// VerdictProfiled: the run's latest verdict refined by a profile step's
	// finding (Verdict.Profile): the same cause, explained by the kernels.
	VerdictProfiled = "profiled"
)

// VerdictEntry is one verdict a run reached, as recorded with the thread
// operation that shows it.
type VerdictEntry struct {
	// Kind is VerdictPreliminary, VerdictRefined or VerdictProfiled.
	Kind string `json:"kind"`
	Plan string `json:"plan"`
	// Step is the triage step that reached it (the profile step, for
	// VerdictProfiled).
	Step    string         `json:"step"`
	At      time.Time      `json:"at"`
	Verdict *vocab.Verdict `json:"verdict"`
	// Sources are the steps whose signals it read; Origins, per signal, the
	// step, source, window and age it came from (triage's findings).
	Sources []string                `json:"sources"`
	Origins map[string]vocab.Origin `json:"origins,omitempty"`
	// Waiting, for a preliminary: the tier-1 steps still running.
	Waiting []string `json:"waiting,omitempty"`
	// Was and Change, for a refined verdict that differs from the
	// preliminary before it: that one's id ("overload") and what the thread
	// said ("was overload, now kv-pressure: …").
	Was    string `json:"was,omitempty"`
	Change string `json:"change,omitempty"`
}

// Upload is one artifact of a run spooled while the store was down.
type Upload struct {
	Key string `json:"key"`
	// Replica holds the spooled file and uploads it (runs.replica).
	Replica string `json:"replica"`
	Size    int64  `json:"size"`
	// State is pending (in the spool, retried with backoff) or uploaded.
	State      string     `json:"state"`
	Attempts   int        `json:"attempts"`
	LastError  string     `json:"last_error,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	UploadedAt *time.Time `json:"uploaded_at,omitempty"`
}

// User is a person who answered, as the chat names them (a Slack user id
// and name).
type User struct {
	ID   string `json:"id"`
	Name string `json:"name,omitempty"`
}

// Feedback is one reader's answer to a run's verdict: right or wrong. A run
// keeps one answer per user, the latest.
type Feedback struct {
	// Verdict is the verdict id the reader judged (one of vocab.Verdicts).
	Verdict string    `json:"verdict"`
	Correct bool      `json:"correct"`
	User    User      `json:"user"`
	At      time.Time `json:"at"`
}

// Action is one thing a person did from the run's thread: who, what, when,
// and what came of it.
type Action struct {
	ID   string `json:"id"`
	Kind string `json:"kind"` // silence, unsilence, refused
	// Arg is the silence's length (1h, 4h, 24h, resolved), or for an
	// unsilence the silencing action's id.
	Arg  string `json:"arg,omitempty"`
	User User   `json:"user"`
	// State is pending (its call not yet known to be made), done, failed or
	// refused; Detail says why a failed or refused action did nothing.
	State     string     `json:"state"`
	Detail    string     `json:"detail,omitempty"`
	SilenceID string     `json:"silence_id,omitempty"`
	EndsAt    *time.Time `json:"ends_at,omitempty"`
	// Live: the silence it made holds (not expired from the thread).
	Live bool      `json:"live,omitempty"`
	At   time.Time `json:"at"`
}

// ListQuery filters and pages a listing of runs.
type ListQuery struct {
	Alertname string
	Status    vocab.Status
	// Limit caps the page (default 50, at most 500).
	Limit int
	// Cursor is a previous Page.Next.
	Cursor string
}

// Page is one page of runs, newest first; Next is the cursor of the following
// page ("" at the end).
type Page struct {
	Runs []Run  `json:"runs"`
	Next string `json:"next,omitempty"`
}
