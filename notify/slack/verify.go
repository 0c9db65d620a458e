package slack

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Slack's request signing (docs.slack.dev, "Verifying requests from Slack").
const (
	// signatureWindow is how far X-Slack-Request-Timestamp may be from now,
	// either way; a signature is remembered as long as it could be replayed.
	signatureWindow = 5 * time.Minute
	// maxSeenSignatures bounds the replay set: far more clicks than one
	// replica takes in five minutes.
	maxSeenSignatures = 10000
)

// verifier checks that a request comes from Slack: its timestamp within
// signatureWindow of now, HMAC-SHA256 of "v0:{timestamp}:{body}" with the signing
// secret equal (in constant time) to X-Slack-Signature's v0=<hex>, and that
// signature not seen before in the window.
//
// The replay set is this process's memory: a replica refuses what it has
// seen, not what another replica saw. That is enough here: a replay can only
// repeat a click Slack delivered in the last five minutes, and recording it
// again is an upsert of the same answer.
type verifier struct {
	secret []byte
	now    func() time.Time

	mu   sync.Mutex
	seen map[string]time.Time // signature → until when it could be replayed
}

func newVerifier(secret string, now func() time.Time) *verifier {
	return &verifier{secret: []byte(secret), now: now, seen: map[string]time.Time{}}
}

// verify returns "" for a request Slack signed and nobody replayed, else a
// reason word and a line for the log and the answer (never the secret, nor
// what the request sent as its signature).
func (v *verifier) verify(h http.Header, body []byte) (word, why string) {
	tsText, sigText := h.Get("X-Slack-Request-Timestamp"), h.Get("X-Slack-Signature")
	if tsText == "" || sigText == "" {
		return "missing_signature", "X-Slack-Request-Timestamp or X-Slack-Signature is missing"
	}
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return "bad_timestamp", "X-Slack-Request-Timestamp is not Unix seconds"
	}
	now := v.now()
	sent := time.Unix(ts, 0)
	if d := now.Sub(sent); d > signatureWindow || d < -signatureWindow {
		return "stale_timestamp", "X-Slack-Request-Timestamp is more than 5 minutes from now"
	}
	hexSig, ok := strings.CutPrefix(sigText, "v0=")
	got, err := hex.DecodeString(hexSig)
	if !ok || err != nil {
		return "bad_signature", "X-Slack-Signature is not v0=<hex>"
	}
	if !hmac.Equal(got, v.sign(tsText, body)) {
		return "bad_signature", "X-Slack-Signature does not match the body and timestamp"
	}
	if !v.remember(hex.EncodeToString(got), sent.Add(signatureWindow), now) {
		return "replayed", "this signature was already used"
	}
	return "", ""
}

// sign is Slack's v0 signature of a request.
func (v *verifier) sign(ts string, body []byte) []byte {
	m := hmac.New(sha256.New, v.secret)
	m.Write([]byte("v0:" + ts + ":"))
	m.Write(body)
	return m.Sum(nil)
}

// remember adds sig to the replay set, false if it is there already. Past
// maxSeenSignatures it forgets what can no longer be replayed, then, still
// full, what would stop mattering soonest.
func (v *verifier) remember(sig string, until, now time.Time) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if u, ok := v.seen[sig]; ok && now.Before(u) {
		return false
	}
	if len(v.seen) >= maxSeenSignatures {
		soonest, first := "", time.Time{}
		for k, u := range v.seen {
			if !now.Before(u) {
				delete(v.seen, k)
			} else if soonest == "" || u.Before(first) {
				soonest, first = k, u
			}
		}
		if len(v.seen) >= maxSeenSignatures {
			delete(v.seen, soonest)
		}
	}
	v.seen[sig] = until
	return true
}
