// Package slackstub is a strict in-process stand-in for the Slack Web API,
// for tests that drive github.com/slack-go/slack against it.
//
// It serves /api/<method> on an httptest server on 127.0.0.1, holds each call
// to a per-method table of Slack's published arguments (rules.go: required
// ones, types, verbs, body types), checks tokens, channels, thread parents
// and block shapes the way Slack does, answers API errors as HTTP 200 with
// {"ok":false,"error":...}, and records the conversation and every call, as
// it arrived, for assertions. Faults (429, 5xx, dropped
// connections before or after the call took effect) are injected per method
// with Fail.
package slackstub

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// Server is a running stub of the Slack Web API.
type Server struct {
	t   testing.TB
	srv *httptest.Server
	now func() time.Time

	mu       sync.Mutex
	bots     []*bot
	channels []*channel
	lastTS   int64 // microseconds of the last ts handed out
	uploads  map[string]*upload
	nextFile int
	calls    []Call
	faults   []*faultState
	// ephemerals are the chat.postEphemeral messages, groups the user
	// groups usergroups.users.list answers (interaction.go).
	ephemerals []Ephemeral
	groups     map[string][]string
}

type bot struct {
	token, userID, botID string
}

type channel struct {
	id, name string
	msgs     []*message // in ts order, top-level and replies alike
	byTS     map[string]*message
}

// Option configures a Server.
type Option func(*config)

type config struct {
	tokens   []string
	channels [][2]string
	now      func() time.Time
}

// WithToken sets the bot token the tests' client uses (default "xoxb-test").
func WithToken(token string) Option {
	return func(c *config) { c.tokens[0] = token }
}

// WithOtherBot installs another bot in the workspace with its own token:
// its messages can be read but not updated by the first bot.
func WithOtherBot(token string) Option {
	return func(c *config) { c.tokens = append(c.tokens, token) }
}

// WithChannel adds a channel; the first use replaces the default C0001 "#alerts".
// The name may be given with or without "#".
func WithChannel(id, name string) Option {
	return func(c *config) { c.channels = append(c.channels, [2]string{id, strings.TrimPrefix(name, "#")}) }
}

// WithClock sets the clock used for message timestamps, call times and fault windows.
func WithClock(now func() time.Time) Option {
	return func(c *config) { c.now = now }
}

// New starts a stub on 127.0.0.1 that is closed when the test ends; the
// conversation is logged with Dump if the test failed.
func New(t testing.TB, opts ...Option) *Server {
	t.Helper()
	cfg := config{tokens: []string{"xoxb-test"}, now: time.Now}
	for _, o := range opts {
		o(&cfg)
	}
	if len(cfg.channels) == 0 {
		cfg.channels = [][2]string{{"C0001", "alerts"}}
	}
	s := &Server{t: t, now: cfg.now, uploads: map[string]*upload{}}
	for i, tok := range cfg.tokens {
		s.bots = append(s.bots, &bot{token: tok, userID: fmt.Sprintf("U0BOT%04d", i+1), botID: fmt.Sprintf("B%04d", i+1)})
	}
	for _, c := range cfg.channels {
		s.channels = append(s.channels, &channel{id: c[0], name: c[1], byTS: map[string]*message{}})
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/api/{method}", s.serveAPI)
	mux.HandleFunc("POST /upload/v1/{file}", s.serveUpload)
	s.srv = httptest.NewServer(mux)
	t.Cleanup(func() {
		s.srv.Close()
		if t.Failed() {
			t.Logf("slackstub conversation:\n%s", s.Dump())
		}
	})
	return s
}

// URL returns the API URL, with its trailing slash, for slack.OptionAPIURL.
func (s *Server) URL() string { return s.srv.URL + "/api/" }

// Outcome says how the stub answered a call.
type Outcome string

// The outcomes a Call can have.
const (
	OutcomeOK          Outcome = "ok"                  // applied, answered ok:true
	OutcomeAPIError    Outcome = "api_error"           // answered ok:false, nothing applied
	OutcomeRateLimited Outcome = "rate_limited"        // HTTP 429, nothing applied
	OutcomeServerError Outcome = "server_error"        // HTTP 5xx, nothing applied
	OutcomeRefused     Outcome = "http_refused"        // HTTP 403 or 405 for the verb, nothing applied
	OutcomeDropped     Outcome = "dropped"             // connection closed, nothing applied
	OutcomeDroppedLate Outcome = "dropped_after_apply" // applied, then the connection closed
)

// Call is one request the stub received.
type Call struct {
	Method  string // "chat.postMessage", …; "upload" for the bytes sent to an upload_url
	Channel string // the channel id when the call named a known channel, else as given
	At      time.Time
	Outcome Outcome
	Error   string // the API error, if any (also set for a late drop whose call failed)
	Request Request
}

// Calls returns every call received so far, in order.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// MaxInWindow returns the largest number of calls to method (any method if
// empty) for channel (any channel if empty) that fell within one window.
func (s *Server) MaxInWindow(method, channel string, window time.Duration) int {
	var at []time.Time
	for _, c := range s.Calls() {
		if (method == "" || c.Method == method) && (channel == "" || c.Channel == channel) {
			at = append(at, c.At)
		}
	}
	best := 0
	for i, j := 0, 0; j < len(at); j++ {
		for at[j].Sub(at[i]) >= window {
			i++
		}
		best = max(best, j-i+1)
	}
	return best
}

// apiError is an ok:false answer.
type apiError struct {
	code   string
	detail []string // response_metadata.messages
}

func errf(code string, detail ...string) *apiError { return &apiError{code: code, detail: detail} }

type handler func(s *Server, b *bot, p url.Values) (map[string]any, *apiError)

var methods = map[string]handler{
	"auth.test":                    (*Server).authTest,
	"chat.postMessage":             (*Server).postMessage,
	"chat.update":                  (*Server).update,
	"conversations.history":        (*Server).history,
	"conversations.list":           (*Server).list,
	"conversations.replies":        (*Server).replies,
	"files.getUploadURLExternal":   (*Server).getUploadURL,
	"files.completeUploadExternal": (*Server).completeUpload,
	"chat.postEphemeral":           (*Server).postEphemeral,
	"usergroups.users.list":        (*Server).userGroupUsers,
}

func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	method := r.PathValue("method")
	req, p, tok, rerr := readRequest(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	call := Call{Method: method, Channel: firstOf(p, "channel", "channel_id"), At: s.now(), Request: req}
	if ch := s.channel(call.Channel); ch != nil {
		call.Channel = ch.id
	}
	f := s.fault(method, call.At)
	if f != nil && f.kind != kindDropAfter {
		call.Outcome = f.answer(w)
		s.calls = append(s.calls, call)
		return
	}
	if status := refuseHTTP(req); status != 0 {
		call.Outcome, call.Error = OutcomeRefused, http.StatusText(status)
		s.calls = append(s.calls, call)
		http.Error(w, http.StatusText(status), status)
		return
	}
	var body map[string]any
	var aerr *apiError
	h, known := methods[method]
	switch {
	case !known:
		aerr = errf("unknown_method")
	case rerr != nil:
		aerr = rerr
	default:
		var b *bot
		if b, aerr = s.auth(tok); aerr == nil {
			if p, aerr = rules[method].check(req); aerr == nil {
				body, aerr = h(s, b, p)
			}
		}
	}
	call.Outcome = OutcomeOK
	if aerr != nil {
		call.Outcome, call.Error = OutcomeAPIError, aerr.code
		body = map[string]any{"ok": false, "error": aerr.code}
		if len(aerr.detail) > 0 {
			body["response_metadata"] = map[string]any{"messages": aerr.detail}
		}
	} else {
		body["ok"] = true
	}
	if f != nil {
		call.Outcome = OutcomeDroppedLate
		s.calls = append(s.calls, call)
		drop(w)
		return
	}
	s.calls = append(s.calls, call)
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	_ = json.NewEncoder(w).Encode(body)
}

func firstOf(p url.Values, keys ...string) string {
	for _, k := range keys {
		if v := p.Get(k); v != "" {
			return v
		}
	}
	return ""
}

// auth finds the bot for the request's token (see readRequest for where it is taken from).
func (s *Server) auth(tok string) (*bot, *apiError) {
	if tok == "" {
		return nil, errf("not_authed")
	}
	for _, b := range s.bots {
		if b.token == tok {
			return b, nil
		}
	}
	return nil, errf("invalid_auth")
}

// channel finds a channel by id, or by name with or without "#".
func (s *Server) channel(idOrName string) *channel {
	for _, c := range s.channels {
		if c.id == idOrName || c.name == strings.TrimPrefix(idOrName, "#") {
			return c
		}
	}
	return nil
}

func (s *Server) authTest(b *bot, _ url.Values) (map[string]any, *apiError) {
	return map[string]any{"url": "https://stub.slack.test/", "team": "stub", "team_id": "T0001",
		"user": "autocapture", "user_id": b.userID, "bot_id": b.botID}, nil
}

// nextTS hands out a ts from the clock, strictly greater than every earlier one.
func (s *Server) nextTS() string {
	us := max(s.now().UnixMicro(), s.lastTS+1)
	s.lastTS = us
	return fmt.Sprintf("%d.%06d", us/1e6, us%1e6)
}
