// Package notify is where people read about runs: the console (default) and Slack
// (later). A run's thread is a projection of the run row: the runner calls Open once,
// Reply per finished step, Close when the run ends or its alert resolves.
package notify

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/vocab"
)

// Notifier posts a run's thread. Every call may be a retry of one whose outcome
// was unknown (a timeout after the request left): when the operation's Retry is
// set, a notifier that can look (Slack: message metadata carrying the run id
// and the operation's Key) finds what an earlier attempt posted instead of
// posting it twice. A notifier asked to slow down returns a *RateLimitedError.
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
	Status    vocab.Status
	Alert     template.Alert
	Playbooks []string
	// Resumed counts restarts after a crash or shutdown; the thread says so.
	Resumed int
	// Channel overrides the notifier's default channel (a playbook's
	// notify.channel, a routing label); "" keeps the default.
	Channel string
	// Retry: an earlier attempt of this Open may have posted the parent.
	Retry bool
	// Group, when set, makes the parent the group's (group.go): the run
	// leads a storm or a fleet of several runs.
	Group *Group
	// Seen, when set, is how often the alert fired before (SeenBefore.Line).
	Seen *SeenBefore
	// Silenced, when set, says the alert is silenced in Alertmanager from
	// the thread: by whom, until when.
	Silenced string
	// Profilable: the run's playbooks have a profile step a reader may
	// take again from the thread.
	Profilable bool
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
	Tier     vocab.Tier
	Status   vocab.Status // succeeded · failed · skipped · cancelled · not-configured
	Summary  string
	Reason   string // the classified failure reason, or why it was skipped
	Error    string
	Duration time.Duration
	Links    []Link
	// Plan is the playbook the step belongs to.
	Plan string
	// Verdict is the step's triage verdict, if it reached one.
	Verdict *vocab.Verdict
	// Repeat, with Verdict, is the earlier run that reached the same verdict
	// on the same instance or model, whose evidence the reply links.
	Repeat *Repeat
	// Key identifies this reply within the run's thread ("step/<plan>/<id>",
	// "run/resumed/2"): the same operation always has the same key.
	Key string
	// Files are artifacts to attach to the reply (charts), read from storage.
	Files []File
	// Retry: an earlier attempt of this reply may have been posted.
	Retry bool
	// Change, when set, makes this the reply saying the refined verdict
	// differs from the preliminary one the thread showed ("was overload, now
	// kv-pressure: …", VerdictChange); StepID is the triage step.
	Change string
	// Member, when set, makes this a group member's compact reply (its
	// outcome and steps in one message); RunID is the member's.
	Member *MemberReport
	// Notice, when set, makes this a note about the run itself, not a step's
	// report ("resumed by replica r1 after r0 stopped (kill or crash) — 2nd
	// resume", late uploads landing): the line the reply leads with, then
	// Summary and Links; no step, kind, tier, status or duration is shown.
	Notice string
	// Buttons, with Notice, are what a reader can do about it (Unsilence
	// under a silence's reply); a notifier without interactivity drops them.
	Buttons []Button
}

// Button is an action a reply offers: Kind names it for the notifier
// (ButtonUnsilence), Value is what the click sends back.
type Button struct {
	Kind, Value, Text string
}

// ButtonUnsilence expires the silence a reply reports; its Value is the
// silencing action's id.
const ButtonUnsilence = "unsilence"

// File is an artifact attached to a reply.
type File struct {
	Name        string
	Key         string // the storage key its bytes are read from
	ContentType string
	Size        int64
}

// Link is a named artifact URL.
type Link struct {
	Name string
	URL  string
	// Valid is how long URL works from when it was made (a presigned
	// link), said beside its name; 0 says nothing (it works as long as the
	// artifact is kept, or for a lifetime too long to matter in a thread).
	Valid time.Duration
	// Pending: the artifact is stored locally (a replica's spool) while the
	// artifact store is unavailable; no URL yet, the upload follows and the
	// thread says when it landed.
	Pending bool
}

// Text is the link's name as a thread shows it: "prometheus.json (link
// valid 7d)" when Valid is set.
func (l Link) Text() string {
	if l.Valid <= 0 {
		return l.Name
	}
	return l.Name + " (link valid " + fmtValid(l.Valid) + ")"
}

// fmtValid says a lifetime in its largest whole unit: 7d, 36h, 90m, 45s.
func fmtValid(d time.Duration) string {
	switch {
	case d >= 24*time.Hour && d%(24*time.Hour) == 0:
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	case d >= time.Hour && d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d >= time.Minute && d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	}
	return d.Round(time.Second).String()
}

// PendingNote is how a pending artifact link reads.
const PendingNote = "stored locally, upload pending"

// Summary is the run's outcome.
type Summary struct {
	RunID      string
	Status     vocab.Status
	Reason     string
	Verdict    *vocab.Verdict
	ResolvedAt *time.Time
	Duration   time.Duration
	// Key identifies this update within the run's thread ("close/verdict",
	// "close/finished", "close/resolved").
	Key string
	// Run is what the parent shows, as Open was given it (from the run's
	// store): a notifier re-renders the parent from it without reading the
	// parent back. Nil: the notifier has only the outcome.
	Run *RunInfo
	// Retry: an earlier attempt of this update may have been delivered.
	Retry bool
	// Group, when set, is what the parent shows instead of Run alone (Run is
	// the group's lead); with Key KeyGroupUpdate the parent is only edited.
	Group *Group
}

// Operation keys of the run-level operations (step replies have
// "step/<plan>/<id>"). The outbox records them; notifiers read Summary.Key.
const (
	KeyOpen         = "open"
	KeyCloseVerdict = "close/verdict"
	// KeyCloseVerdictPreliminary edits the parent with a preliminary verdict
	// (reached before the scrape's second sample); KeyCloseVerdict then
	// edits it with the refined one.
	KeyCloseVerdictPreliminary = "close/verdict/preliminary"
	// KeyCloseVerdictProfiled, followed by "/<plan>/<step>", edits the
	// parent with the verdict a profile step's finding refined.
	KeyCloseVerdictProfiled = "close/verdict/profiled"
	KeyCloseFinished        = "close/finished"
	KeyCloseResolved        = "close/resolved"
	// KeyActionEdit prefixes an edit of the parent after an action from the
	// thread (a silence made or ended): the parent shows the silence.
	KeyActionEdit = "action/edit/"
)

// RateLimitedError asks the caller to try again after RetryAfter (Slack's 429
// with Retry-After). Nothing was delivered.
type RateLimitedError struct {
	RetryAfter time.Duration
	Err        error
}

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("rate limited, retry after %s: %v", e.RetryAfter, e.Err)
}

func (e *RateLimitedError) Unwrap() error { return e.Err }
