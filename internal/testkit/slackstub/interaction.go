package slackstub

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// ClickBody is the form Slack posts to an interactivity URL for a click on
// one button (a block_actions payload, as Slack's docs show it).
func ClickBody(actionID, value string) []byte {
	p := map[string]any{"type": "block_actions", "user": map[string]any{"id": "U0ALICE", "username": "alice", "name": "alice"},
		"channel": map[string]any{"id": "C0AUTOCAP"}, "message": map[string]any{"ts": "1795921200.000100"},
		"container": map[string]any{"type": "message"}, "response_url": "https://hooks.slack.com/actions/T0/1/x",
		"actions": []map[string]any{{"action_id": actionID, "block_id": "feedback", "value": value, "type": "button"}}}
	raw, _ := json.Marshal(p)
	return []byte(url.Values{"payload": {string(raw)}}.Encode())
}

// Signed are the headers Slack sends with body at ts, signed with secret
// (v0: HMAC-SHA256 over "v0:<ts>:<body>").
func Signed(secret string, ts time.Time, body []byte) http.Header {
	t := strconv.FormatInt(ts.Unix(), 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("v0:" + t + ":"))
	m.Write(body)
	return http.Header{"X-Slack-Request-Timestamp": {t}, "X-Slack-Signature": {"v0=" + hex.EncodeToString(m.Sum(nil))},
		"Content-Type": {"application/x-www-form-urlencoded"}}
}

// Clicker is who clicks in ClickAs: a Slack user id and name.
type Clicker struct{ ID, Name string }

// ClickAs is the form Slack posts for u's click on one button of the
// message at messageTS in channel (a block_actions payload as Slack's
// interactivity docs show it: user, channel, message, container,
// trigger_id, response_url, and the action with its own action_ts). A
// retry of the same click carries the same action_ts; another click, a
// later one.
func ClickAs(u Clicker, channel, messageTS, actionTS, actionID, value string) []byte {
	p := map[string]any{"type": "block_actions", "user": map[string]any{"id": u.ID, "username": u.Name, "name": u.Name},
		"api_app_id": "A0AUTOCAP", "token": "legacy-verification-token", "trigger_id": "1.2." + actionTS,
		"team":         map[string]any{"id": "T0001", "domain": "stub"},
		"channel":      map[string]any{"id": channel, "name": "alerts"},
		"message":      map[string]any{"type": "message", "ts": messageTS},
		"container":    map[string]any{"type": "message", "message_ts": messageTS, "channel_id": channel, "is_ephemeral": false},
		"response_url": "https://hooks.slack.com/actions/T0001/1/x",
		"actions": []map[string]any{{"action_id": actionID, "block_id": "actions", "value": value, "type": "button",
			"action_ts": actionTS}}}
	raw, _ := json.Marshal(p)
	return []byte(url.Values{"payload": {string(raw)}}.Encode())
}

// Ephemeral is one chat.postEphemeral message: seen by User alone.
type Ephemeral struct {
	Channel, User, ThreadTS, Text string
}

// Ephemerals returns the ephemeral messages posted so far, in order.
func (s *Server) Ephemerals() []Ephemeral {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Ephemeral(nil), s.ephemerals...)
}

// SetUserGroup makes usergroups.users.list answer users for group id.
func (s *Server) SetUserGroup(id string, users ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.groups == nil {
		s.groups = map[string][]string{}
	}
	s.groups[id] = users
}

func (s *Server) postEphemeral(_ *bot, p url.Values) (map[string]any, *apiError) {
	ch := s.channel(p.Get("channel"))
	if ch == nil {
		return nil, errf("channel_not_found")
	}
	if p.Get("text") == "" && p.Get("blocks") == "" {
		return nil, errf("no_text")
	}
	s.ephemerals = append(s.ephemerals, Ephemeral{Channel: ch.id, User: p.Get("user"), ThreadTS: p.Get("thread_ts"), Text: p.Get("text")})
	return map[string]any{"message_ts": s.nextTS()}, nil
}

func (s *Server) userGroupUsers(_ *bot, p url.Values) (map[string]any, *apiError) {
	users, ok := s.groups[p.Get("usergroup")]
	if !ok {
		return nil, errf("no_such_subteam")
	}
	return map[string]any{"users": append([]string{}, users...)}, nil
}
