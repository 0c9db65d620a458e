// Package notify is where people read about runs: the console (default) and Slack
// (later). A run's thread is a projection of the run row: the runner calls Open once,
// Reply per finished step, Close when the run ends or its alert resolves.
package notify

import (
	"context"
	"time"

	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/capture"
)

// Notifier posts a run's thread.
type Notifier interface {
	// Open posts the thread's parent message, before any capture starts.
	Open(ctx context.Context, run RunInfo) (Thread, error)
	// Reply posts one finished step into the thread.
	Reply(ctx context.Context, t Thread, r StepReport) error
	// Close edits the parent with the outcome (verdict, resolution) and adds a reply.
	Close(ctx context.Context, t Thread, s Summary) error
}

// RunInfo is what the parent message shows.
type RunInfo struct {
	ID        string
	Status    string
	Alert     template.Alert
	Playbooks []string
	// Resumed counts restarts after a crash or shutdown; the thread says so.
	Resumed int
}

// Thread identifies a posted parent message; it is persisted on the run row so a
// restarted daemon replies into the same thread.
type Thread struct {
	Channel string `json:"channel,omitempty"`
	TS      string `json:"ts,omitempty"`
}

// StepReport is one finished step.
type StepReport struct {
	RunID    string
	StepID   string
	Kind     string
	Tier     capture.Tier
	Status   string // succeeded · failed · skipped · cancelled
	Summary  string
	Reason   string // the classified failure reason, or why it was skipped
	Error    string
	Duration time.Duration
	Links    []Link
}

// Link is a named artifact URL.
type Link struct {
	Name string
	URL  string
}

// Summary is the run's outcome.
type Summary struct {
	RunID      string
	Status     string
	Reason     string
	Verdict    *capture.Verdict
	ResolvedAt *time.Time
	Duration   time.Duration
}
