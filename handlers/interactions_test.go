package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/internal/testkit/slackstub"
	slacknotify "github.com/autocapture/autocapture/notify/slack"
	"github.com/autocapture/autocapture/runner/runs"
)

// The endpoint itself (signatures, payloads, limits, its counter) is tested
// in notify/slack; these tests are of its mount: the route, the wiring of
// the run service, and the shared registry.

// The example secret of Slack's documentation, and the tests' fixed clock.
const signingSecret = "8f742231b10e8888abcd99yyyzzz85a5"

var clickNow = time.Date(2026, 11, 29, 3, 20, 0, 0, time.UTC)

// answer is one Feedback call the fake received.
type answer struct {
	run, verdict string
	correct      bool
	user         runs.User
}

// fakeFeedback records answers for the runs it knows, and refuses the rest
// as the run service does (runs.ErrNotFound).
type fakeFeedback struct {
	mu      sync.Mutex
	known   map[string]bool
	err     error // returned when set (a failing store)
	answers []answer
}

func (f *fakeFeedback) Feedback(_ context.Context, runID, verdict string, correct bool, user runs.User) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	if !f.known[runID] {
		return fmt.Errorf("fake: %w: %s", runs.ErrNotFound, runID)
	}
	f.answers = append(f.answers, answer{runID, verdict, correct, user})
	return nil
}

func (f *fakeFeedback) recorded() []answer {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]answer(nil), f.answers...)
}

// withSlack turns interactivity on with the test secret, fb and the fixed clock.
func withSlack(fb Feedback) func(*Options) {
	return func(o *Options) {
		o.SlackSigningSecret, o.Feedback, o.Now = config.Secret(signingSecret), fb, func() time.Time { return clickNow }
	}
}

// clickBody and signed are what Slack posts for a click (the stand-in's).
var (
	clickBody = slackstub.ClickBody
	signed    = slackstub.Signed
)

const interactions = "/hooks/slack/interactions"

// TestSlackInteractionsMounted: through the router, without bearer auth, a
// signed click reaches Feedback in the run service's terms; an unknown run
// is answered 200, a failing store 503, a bad signature 401; every answer
// is counted on the registry /metrics serves, and another method is 405.
func TestSlackInteractionsMounted(t *testing.T) {
	right := clickBody(slacknotify.ActionVerdictRight, slacknotify.FeedbackValue("r1", "kv-pressure"))
	unknown := clickBody(slacknotify.ActionVerdictWrong, slacknotify.FeedbackValue("r9", "kv-pressure"))
	tests := []struct {
		name     string
		body     []byte
		header   http.Header
		storeErr error
		code     int
		errWord  string
		want     []answer
	}{
		{name: "signed click", body: right, header: signed(signingSecret, clickNow, right), code: 200,
			want: []answer{{"r1", "kv-pressure", true, runs.User{ID: "U0ALICE", Name: "alice"}}}},
		{name: "unknown run", body: unknown, header: signed(signingSecret, clickNow, unknown), code: 200},
		{name: "bad signature", body: right, header: signed("not-the-secret", clickNow, right), code: 401, errWord: "bad_signature"},
		{name: "store down", body: right, header: signed(signingSecret, clickNow, right), storeErr: errors.New("database is locked"),
			code: 503, errWord: "store_unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fb := &fakeFeedback{known: map[string]bool{"r1": true}, err: tt.storeErr}
			h := newHarness(t, func(o *Options) { withSlack(fb)(o); o.Auth = config.Auth{BearerToken: "s3cret"} })
			rec := h.do("POST", interactions, tt.body, tt.header)
			if rec.Code != tt.code {
				t.Fatalf("code %d, want %d; body %s", rec.Code, tt.code, rec.Body)
			}
			if tt.errWord != "" {
				var eb errorBody
				if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil || eb.Error != tt.errWord || eb.Status != "error" {
					t.Errorf("error body %s, want error %q", rec.Body, tt.errWord)
				}
			}
			if got := fb.recorded(); fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("recorded %+v, want %+v", got, tt.want)
			}
			want := fmt.Sprintf("# HELP autocapture_slack_interactions_total Slack interactivity requests (verdict buttons) answered, by HTTP status code (401: not signed by Slack).\n"+
				"# TYPE autocapture_slack_interactions_total counter\nautocapture_slack_interactions_total{code=\"%d\"} 1\n", tt.code)
			if err := testutil.GatherAndCompare(h.reg, strings.NewReader(want), "autocapture_slack_interactions_total"); err != nil {
				t.Error(err)
			}
			if h.logs.FilterMessage("HTTP request answered.").FilterField(zap.Int("code", tt.code)).Len() != 1 {
				t.Errorf("the request was not logged with its code %d", tt.code)
			}
		})
	}
	h := newHarness(t, withSlack(&fakeFeedback{}))
	if rec := h.do("GET", interactions, nil, nil); rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET: code %d, want 405", rec.Code)
	}
}

// TestSlackFeedbackAdapter: the run service's refusals of a click become
// notify/slack's UnknownFeedback (ignored), its other errors stay the
// store's (503), and the user goes across whole.
func TestSlackFeedbackAdapter(t *testing.T) {
	for _, tt := range []struct {
		err     error
		unknown bool
	}{
		{nil, false},
		{fmt.Errorf("runner: %w: r9", runs.ErrNotFound), true},
		{fmt.Errorf("%w: no verdict overload", runs.ErrBadFeedback), true},
		{errors.New("database is locked"), false},
	} {
		var got runs.User
		f := slackFeedback{feedbackFunc(func(_ context.Context, _, _ string, _ bool, u runs.User) error { got = u; return tt.err })}
		err := f.RecordFeedback(context.Background(), "r1", "kv-pressure", true, slacknotify.User{ID: "U0ALICE", Name: "alice"})
		if errors.Is(err, slacknotify.ErrUnknownFeedback) != tt.unknown || !errors.Is(err, tt.err) ||
			(tt.err != nil && err.Error() != tt.err.Error()) {
			t.Errorf("store error %v became %v (unknown: %v), want unknown %v", tt.err, err, errors.Is(err, slacknotify.ErrUnknownFeedback), tt.unknown)
		}
		if got != (runs.User{ID: "U0ALICE", Name: "alice"}) {
			t.Errorf("user %+v reached the run service", got)
		}
	}
}

type feedbackFunc func(ctx context.Context, runID, verdict string, correct bool, user runs.User) error

func (f feedbackFunc) Feedback(ctx context.Context, runID, verdict string, correct bool, user runs.User) error {
	return f(ctx, runID, verdict, correct, user)
}

// TestSlackInteractionsOffWithoutSecret: no signing secret, no route.
func TestSlackInteractionsOffWithoutSecret(t *testing.T) {
	h := newHarness(t, nil)
	right := clickBody(slacknotify.ActionVerdictRight, "r1|kv-pressure")
	if rec := h.do("POST", interactions, right, signed(signingSecret, time.Now(), right)); rec.Code != 404 {
		t.Fatalf("code %d, want 404", rec.Code)
	}
	if _, err := New(Options{Runs: newFakeRuns(), Registry: prometheus.NewRegistry(), Log: h.srv.log, SlackSigningSecret: "s"}); err == nil {
		t.Error("New took a signing secret without Feedback")
	}
}
