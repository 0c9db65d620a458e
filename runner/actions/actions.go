// Package actions carries out what people do from a run's Slack thread: a
// silence of the run's alert in Alertmanager, and its end; a profile taken
// again (again.go). Each click is an action row written before the call and
// finished after (with the thread's reply, in one transaction), so a
// repeated click, a retried interaction or a process killed mid-call makes
// one silence (one profile) and one reply.
//
// What a kill -9 leaves between each pair of writes:
//   - row written (pending), before Alertmanager was called: no silence; the
//     row's claim lapses and the next click or the sweep makes the silence.
//   - silence made, before the row was finished: one silence, a pending row;
//     the resumed action finds that silence by its matchers and comment
//     (silences.Ensure) and makes none.
//   - row finished with the reply's outbox row: one transaction, both or
//     neither; the outbox delivers the reply once.
//   - unsilence expired, before its row was finished: the silence is gone;
//     the resumed unsilence expires it again, which is a no-op.
//
// What a silence matches is read from the run's stored plans each time: they
// are written once, in the transaction that posts the parent and so its
// button, so a resumed action matches what the first attempt matched.
package actions

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/outbox"
	"github.com/autocapture/autocapture/silences"
	"github.com/autocapture/autocapture/vocab"
)

// Silencer is the Alertmanager (*silences.Client).
type Silencer interface {
	Ensure(ctx context.Context, s silences.Silence) (string, bool, error)
	Expire(ctx context.Context, id string) error
}

// Store is the runner's store.
type Store interface {
	database.Querier
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// Appender records a thread operation in a transaction (*outbox.Outbox).
type Appender interface {
	Append(ctx context.Context, tx *sql.Tx, runID string, ops ...outbox.Op) error
}

// Deps are what the actions need.
type Deps struct {
	Store   func() Store
	Tables  database.Tables
	Dialect database.Dialect
	Outbox  Appender
	// AM is the Alertmanager; nil: no silences.
	AM Silencer
	// Again and Guard are "Profile again": the runs that take a profile
	// again, and the profiling guard asked first; nil: off.
	Again Againer
	Guard Guard
	// ReportLink links a run's artifact (a profile's report) in a reply;
	// nil: the run pages alone.
	ReportLink func(ctx context.Context, runID string, a vocab.Artifact) (notify.Link, bool)
	// AMTimeout is alertmanager.timeout and AMURLs how many members it has:
	// together they bound a call, and so an action's claim.
	AMTimeout time.Duration
	AMURLs    int
	// RunURL is the run page's address, for the silence's comment.
	RunURL func(runID string) string
	// Matchers are the alert labels a silence matches when the run's plan
	// chose none (silence.matchers); empty: DefaultMatchers.
	Matchers []string
	Log      *zap.Logger
}

// DefaultMatchers identify a vLLM alert: which alert, on which instance, of
// which model.
var DefaultMatchers = []string{"alertname", "instance", "model_name"}

// Kinds of action.
const (
	KindSilence   = "silence"
	KindUnsilence = "unsilence"
	KindRefused   = "refused"
	KindProfile   = "profile" // "Profile again"
)

// silenceFor is how long each choice silences; "resolved" lasts until the
// alert resolves (the run's resolution expires it), a week at most.
var silenceFor = map[string]time.Duration{"1h": time.Hour, "4h": 4 * time.Hour, "24h": 24 * time.Hour, "resolved": 7 * 24 * time.Hour}

// Actions carries out the thread's actions.
type Actions struct {
	d     Deps
	claim time.Duration
	// The sweep (Start, Stop).
	done chan struct{}
	stop sync.Once
	wg   sync.WaitGroup
}

// New builds the actions of d.
func New(d Deps) (*Actions, error) {
	if d.Store == nil || d.Outbox == nil || (d.AM == nil && d.Again == nil) {
		return nil, errors.New("actions: a store, an outbox and an Alertmanager or the runs are required")
	}
	if (d.Again == nil) != (d.Guard == nil) {
		return nil, errors.New("actions: profile again needs both the runs and the profiling guard")
	}
	if d.Log == nil {
		d.Log = zap.NewNop()
	}
	if len(d.Matchers) == 0 {
		d.Matchers = DefaultMatchers
	}
	// A claim outlives the longest call: a find and a create, each over every member.
	claim := 2*time.Duration(max(d.AMURLs, 1))*d.AMTimeout + 5*time.Second
	return &Actions{d: d, claim: claim}, nil
}

// Click is one press of an action's button.
type Click struct {
	RunID, Choice    string // silence; RunID alone: profile again
	SilenceAction    string // unsilence: the silencing action's id
	Interaction      string
	UserID, UserName string
}

// Result is what became of a click: a word for the metric, and a line for
// the clicker alone ("" when the thread's reply says it).
type Result struct{ Result, Private string }

// Results of a silence that was not tried: its alert carries none of the
// labels it matches on (a silence without matchers would silence every
// alert), or its run's plans, which choose them, are not yet stored.
const (
	ResultUnmatched = "unmatched"
	ResultUnplanned = "unplanned"
)

// ErrUnknown marks a click on a run or action the store does not know.
var ErrUnknown = errors.New("actions: no such run or action")

// Silences says whether silences are on (an Alertmanager is configured).
func (a *Actions) Silences() bool { return a.d.AM != nil }

func (a *Actions) db() Store { return a.d.Store() }

func (a *Actions) claimMS() int64 { return a.claim.Milliseconds() }

// target is what a silence of run runID matches: the alert's labels, and
// the names of those it matches as the run's plan chose them (the first
// plan that sets silence.matchers, else the default). planned is false for
// a run whose plans are not yet stored: its choice is not yet known.
func (a *Actions) target(ctx context.Context, runID string) (t target, err error) {
	r, err := a.d.Tables.Runs.Get(ctx, a.db(), runID)
	if errors.Is(err, sql.ErrNoRows) {
		return t, fmt.Errorf("%w: run %s", ErrUnknown, runID)
	}
	if err != nil {
		return t, fmt.Errorf("actions: read run %s: %w", runID, err)
	}
	var alert struct {
		Labels map[string]string `json:"labels"`
	}
	if err := json.Unmarshal([]byte(r.Alert), &alert); err != nil {
		return t, fmt.Errorf("actions: run %s's alert: %w", runID, err)
	}
	t = target{labels: alert.Labels, names: a.d.Matchers, planned: r.Plans.Valid || r.FinishedAt.Valid}
	if r.Plans.Valid {
		var plans []playbooks.StoredPlan
		if err := json.Unmarshal([]byte(r.Plans.String), &plans); err != nil {
			return t, fmt.Errorf("actions: run %s's plans: %w", runID, err)
		}
		for _, p := range plans {
			if len(p.Silence) > 0 {
				t.names = p.Silence
				break
			}
		}
	}
	return t, nil
}

// target is what a run's silence matches (Actions.target).
type target struct {
	labels  map[string]string
	names   []string
	planned bool
}

// matchers are the silence's: the chosen labels the alert carries. None
// left (the alert lacks them all) is refused by the caller: a silence
// without matchers would silence every alert.
func (t target) matchers() []silences.Matcher {
	var out []silences.Matcher
	for _, name := range t.names {
		if v, ok := t.labels[name]; ok && v != "" {
			out = append(out, silences.Matcher{Name: name, Value: v})
		}
	}
	return out
}

// Refused keeps a click the access rules turned down.
func (a *Actions) Refused(ctx context.Context, c Click, why string) error {
	runID := c.RunID
	if runID == "" {
		r, err := a.d.Tables.Actions.Get(ctx, a.db(), c.SilenceAction)
		if err != nil {
			return fmt.Errorf("actions: refused click on %s: %w", c.SilenceAction, err)
		}
		runID = r.RunID
	}
	row := database.ActionRow{ID: "refused/" + runID + "/" + c.Interaction, RunID: runID, Kind: KindRefused,
		Arg: c.Choice, UserID: c.UserID, UserName: c.UserName, State: database.ActionRefused, Detail: why}
	if err := a.d.Tables.Actions.Record(ctx, a.db(), row); err != nil {
		return fmt.Errorf("actions: keep the refused click on run %s: %w", runID, err)
	}
	return nil
}
