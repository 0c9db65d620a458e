package slack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/internal/testkit/slackstub"
)

// The example secret of Slack's documentation, and the tests' fixed clock.
const signingSecret = "8f742231b10e8888abcd99yyyzzz85a5"

var clickNow = time.Date(2026, 11, 29, 3, 20, 0, 0, time.UTC)

// answer is one RecordFeedback call the fake received.
type answer struct {
	run, verdict string
	correct      bool
	user         User
}

// fakeFeedback records answers for the runs it knows; any other run is
// refused as the run service's adapter refuses it (UnknownFeedback).
type fakeFeedback struct {
	mu      sync.Mutex
	known   map[string]bool
	err     error // returned when set (a failing store)
	answers []answer
}

func (f *fakeFeedback) RecordFeedback(_ context.Context, runID, verdict string, correct bool, user User) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	if !f.known[runID] {
		return UnknownFeedback(fmt.Errorf("fake: no such run: %s", runID))
	}
	f.answers = append(f.answers, answer{runID, verdict, correct, user})
	return nil
}

func (f *fakeFeedback) recorded() []answer {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]answer(nil), f.answers...)
}

// inbound is an Interactions with the test secret, fb and the fixed clock,
// its registry and observed logs.
type inbound struct {
	h    *Interactions
	reg  *prometheus.Registry
	logs *observer.ObservedLogs
}

func newInbound(t testing.TB, fb FeedbackRecorder, now func() time.Time) *inbound {
	t.Helper()
	core, logs := observer.New(zap.DebugLevel)
	in := &inbound{reg: prometheus.NewRegistry(), logs: logs}
	h, err := NewInteractions(InteractionsOptions{SigningSecret: config.Secret(signingSecret), Feedback: fb,
		Registerer: in.reg, Now: now, Log: zap.New(core)})
	if err != nil {
		t.Fatalf("NewInteractions: %v", err)
	}
	in.h = h
	return in
}

// do serves one request and returns the recorder.
func (in *inbound) do(body []byte, header http.Header) *httptest.ResponseRecorder {
	return in.serve(newRequest(body, header, false))
}

func (in *inbound) serve(req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	in.h.ServeHTTP(rec, req)
	return rec
}

// newRequest is a POST of b to the route handlers mounts the endpoint at;
// chunked leaves its length unknown.
func newRequest(b []byte, header http.Header, chunked bool) *http.Request {
	req := httptest.NewRequest("POST", interactions, bytes.NewReader(b))
	for k, v := range header {
		req.Header[k] = v
	}
	if chunked {
		req.ContentLength = -1
	}
	return req
}

// clickBody and signed are what Slack posts for a click (the stand-in's).
var (
	clickBody = slackstub.ClickBody
	signed    = slackstub.Signed
)

const interactions = "/hooks/slack/interactions"

func TestSlackInteractions(t *testing.T) {
	right := clickBody(ActionVerdictRight, FeedbackValue("r1", "kv-pressure"))
	wrong := clickBody(ActionVerdictWrong, FeedbackValue("r1", "kv-pressure"))
	huge := clickBody(ActionVerdictRight, strings.Repeat("x", 70<<10))
	tests := []struct {
		name     string
		body     []byte
		header   http.Header
		chunked  bool
		storeErr error
		code     int
		errWord  string
		want     []answer
	}{
		{name: "signed click on right", body: right, header: signed(signingSecret, clickNow, right), code: 200,
			want: []answer{{"r1", "kv-pressure", true, User{ID: "U0ALICE", Name: "alice"}}}},
		{name: "signed click on wrong", body: wrong, header: signed(signingSecret, clickNow.Add(-4*time.Minute), wrong), code: 200,
			want: []answer{{"r1", "kv-pressure", false, User{ID: "U0ALICE", Name: "alice"}}}},
		{name: "signed with another secret", body: right, header: signed("not-the-secret", clickNow, right), code: 401, errWord: "bad_signature"},
		{name: "body changed after signing", body: wrong, header: signed(signingSecret, clickNow, right), code: 401, errWord: "bad_signature"},
		{name: "timestamp over 5 minutes old", body: right, header: signed(signingSecret, clickNow.Add(-5*time.Minute-time.Second), right),
			code: 401, errWord: "stale_timestamp"},
		{name: "timestamp over 5 minutes ahead", body: right, header: signed(signingSecret, clickNow.Add(5*time.Minute+time.Second), right),
			code: 401, errWord: "stale_timestamp"},
		{name: "no timestamp header", body: right, header: without(signed(signingSecret, clickNow, right), "X-Slack-Request-Timestamp"),
			code: 401, errWord: "missing_signature"},
		{name: "no signature header", body: right, header: without(signed(signingSecret, clickNow, right), "X-Slack-Signature"),
			code: 401, errWord: "missing_signature"},
		{name: "no headers at all", body: right, code: 401, errWord: "missing_signature"},
		{name: "timestamp not a number", body: right, header: with(signed(signingSecret, clickNow, right), "X-Slack-Request-Timestamp", "soon"),
			code: 401, errWord: "bad_timestamp"},
		{name: "signature of another version", body: right, header: with(signed(signingSecret, clickNow, right), "X-Slack-Signature", "v1=abcd"),
			code: 401, errWord: "bad_signature"},
		{name: "oversized with Content-Length", body: huge, header: signed(signingSecret, clickNow, huge), code: 413, errWord: "body_too_large"},
		{name: "oversized chunked", body: huge, header: signed(signingSecret, clickNow, huge), chunked: true, code: 413, errWord: "body_too_large"},
		{name: "unknown action", body: clickBody("link_0", "Grafana"), header: signed(signingSecret, clickNow, clickBody("link_0", "Grafana")), code: 200},
		{name: "unknown run", body: clickBody(ActionVerdictRight, "r9|kv-pressure"),
			header: signed(signingSecret, clickNow, clickBody(ActionVerdictRight, "r9|kv-pressure")), code: 200},
		{name: "value not run|verdict", body: clickBody(ActionVerdictRight, "r1"),
			header: signed(signingSecret, clickNow, clickBody(ActionVerdictRight, "r1")), code: 200},
		{name: "not a button", body: []byte("payload=%7B%22type%22%3A%22view_submission%22%7D"),
			header: signed(signingSecret, clickNow, []byte("payload=%7B%22type%22%3A%22view_submission%22%7D")), code: 200},
		{name: "signed but no JSON payload", body: []byte("payload=nope"), header: signed(signingSecret, clickNow, []byte("payload=nope")),
			code: 400, errWord: "bad_payload"},
		{name: "store down", body: right, header: signed(signingSecret, clickNow, right), storeErr: errors.New("database is locked"),
			code: 503, errWord: "store_unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fb := &fakeFeedback{known: map[string]bool{"r1": true}, err: tt.storeErr}
			in := newInbound(t, fb, func() time.Time { return clickNow })
			rec := in.serve(newRequest(tt.body, tt.header, tt.chunked))
			if rec.Code != tt.code {
				t.Fatalf("code %d, want %d; body %s", rec.Code, tt.code, rec.Body)
			}
			if tt.errWord != "" {
				var eb errorBody
				if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil || eb.Error != tt.errWord {
					t.Errorf("error body %s, want error %q", rec.Body, tt.errWord)
				}
				if ct := rec.Header().Get("Content-Type"); ct != "application/json; charset=utf-8" {
					t.Errorf("error answered as %q, want JSON", ct)
				}
			}
			if got := fb.recorded(); fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("recorded %+v, want %+v", got, tt.want)
			}
			if n := testutil.ToFloat64(in.h.answered.WithLabelValues(strconv.Itoa(tt.code))); n != 1 {
				t.Errorf("autocapture_slack_interactions_total{code=%d} = %v, want 1", tt.code, n)
			}
			if n, err := testutil.GatherAndCount(in.reg, "autocapture_slack_interactions_total"); err != nil || n != 1 {
				t.Errorf("registry holds %d autocapture_slack_interactions_total series (%v), want 1", n, err)
			}
			secretNowhere(t, in.logs, rec.Body.String())
		})
	}
}

// TestSlackInteractionReplayRefused: the very same signed request a second
// time within the window is refused and records nothing more; a new click
// (a new timestamp, so a new signature) is taken.
func TestSlackInteractionReplayRefused(t *testing.T) {
	fb := &fakeFeedback{known: map[string]bool{"r1": true}}
	in := newInbound(t, fb, func() time.Time { return clickNow })
	right := clickBody(ActionVerdictRight, "r1|kv-pressure")
	header := signed(signingSecret, clickNow.Add(-time.Minute), right)
	for i, want := range []int{200, 401} {
		if rec := in.do(right, header); rec.Code != want {
			t.Fatalf("request %d: code %d, want %d (%s)", i+1, rec.Code, want, rec.Body)
		} else if want == 401 && !strings.Contains(rec.Body.String(), `"replayed"`) {
			t.Errorf("replay answered %s, want error replayed", rec.Body)
		}
	}
	if rec := in.do(right, signed(signingSecret, clickNow, right)); rec.Code != 200 {
		t.Fatalf("a new click: code %d", rec.Code)
	}
	if got := len(fb.recorded()); got != 2 {
		t.Fatalf("recorded %d answers, want 2 (the replay refused)", got)
	}
}

// TestNewInteractionsNeedsSecretAndFeedback: no endpoint without what it
// verifies with and records into.
func TestNewInteractionsNeedsSecretAndFeedback(t *testing.T) {
	fb := &fakeFeedback{}
	for name, o := range map[string]InteractionsOptions{
		"no secret":   {Feedback: fb, Log: zap.NewNop()},
		"no feedback": {SigningSecret: signingSecret, Log: zap.NewNop()},
		"no log":      {SigningSecret: signingSecret, Feedback: fb},
	} {
		if _, err := NewInteractions(o); err == nil {
			t.Errorf("%s: NewInteractions took it", name)
		}
	}
}

// TestUnknownFeedbackKeepsTheStoresWords: the wrapper marks the error for
// the handler and changes nothing of what it says or wraps.
func TestUnknownFeedbackKeepsTheStoresWords(t *testing.T) {
	base := errors.New("runner: no such run")
	err := UnknownFeedback(fmt.Errorf("%w: r9", base))
	if !errors.Is(err, ErrUnknownFeedback) || !errors.Is(err, base) || err.Error() != "runner: no such run: r9" {
		t.Errorf("UnknownFeedback: %q, Is(ErrUnknownFeedback) %v, Is(base) %v", err, errors.Is(err, ErrUnknownFeedback), errors.Is(err, base))
	}
	if errors.Is(base, ErrUnknownFeedback) {
		t.Error("an unwrapped error is taken for unknown feedback")
	}
}

func without(h http.Header, key string) http.Header { h.Del(key); return h }

func with(h http.Header, key, value string) http.Header { h.Set(key, value); return h }

// secretNowhere: the signing secret is in no log line and no answer.
func secretNowhere(t *testing.T, logs *observer.ObservedLogs, answer string) {
	t.Helper()
	if strings.Contains(answer, signingSecret) {
		t.Errorf("the signing secret is in the answer")
	}
	for _, e := range logs.All() {
		if strings.Contains(e.Message+fmt.Sprint(e.ContextMap()), signingSecret) {
			t.Errorf("the signing secret is in the log line %q", e.Message)
		}
	}
}
