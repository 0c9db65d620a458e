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
