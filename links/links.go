// Package links signs and verifies the artifact links a thread carries: a URL
// under web.external_url that the daemon's artifact route serves (or redirects
// to a fresh presigned URL) when it carries a valid token for exactly that run
// and key. A token is an expiry and an HMAC-SHA256 over a versioned message;
// it never carries the key it was made with.
package links

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The query parameters a signed link carries.
const (
	ParamExpires   = "exp"
	ParamSignature = "sig"
)

// MinKeyBytes is the shortest key a Signer takes.
const MinKeyBytes = 16

// Verify's errors: a token past its expiry, and one that is not ours (made
// with another key, for another run or key, or altered).
var (
	ErrExpired      = errors.New("link expired")
	ErrBadSignature = errors.New("link signature does not match")
	ErrMalformed    = errors.New("link token is malformed")
)

// Signer makes and checks link tokens with one HMAC-SHA256 key, shared by
// every replica (see runner's link key).
type Signer struct {
	key []byte
}

// NewSigner returns a Signer over key, which must hold at least MinKeyBytes.
func NewSigner(key []byte) (*Signer, error) {
	if len(key) < MinKeyBytes {
		return nil, fmt.Errorf("links: key of %d bytes: want at least %d", len(key), MinKeyBytes)
	}
	return &Signer{key: append([]byte(nil), key...)}, nil
}

// Sign returns the token that lets the holder fetch key of run runID until
// exp (to the second): exp (Unix seconds) and sig (base64url, no padding).
func (s *Signer) Sign(runID, key string, exp time.Time) url.Values {
	e := exp.Unix()
	return url.Values{
		ParamExpires:   {strconv.FormatInt(e, 10)},
		ParamSignature: {base64.RawURLEncoding.EncodeToString(s.mac(runID, key, e))},
	}
}

// Verify checks that q holds a token Sign made for exactly runID and key,
// unexpired at now. The signature is checked first and in constant time: an
// expired answer is only given for a token that is ours, so a forged one
// learns nothing from which error it gets.
func (s *Signer) Verify(runID, key string, q url.Values, now time.Time) error {
	if strings.Contains(runID, "\n") || strings.Contains(key, "\n") {
		return ErrMalformed // Sign never made one: the message would be ambiguous
	}
	es, sig := q.Get(ParamExpires), q.Get(ParamSignature)
	if es == "" || sig == "" || len(q[ParamExpires]) > 1 || len(q[ParamSignature]) > 1 {
		return ErrMalformed
	}
	e, err := strconv.ParseInt(es, 10, 64)
	if err != nil || strconv.FormatInt(e, 10) != es {
		return ErrMalformed
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		return ErrMalformed
	}
	if !hmac.Equal(got, s.mac(runID, key, e)) {
		return ErrBadSignature
	}
	if now.Unix() >= e {
		return ErrExpired
	}
	return nil
}

// mac is the HMAC of the versioned message. Run ids and keys hold no newline
// (storage.ValidKey refuses control characters, Verify any newline), so the
// message is unambiguous.
func (s *Signer) mac(runID, key string, exp int64) []byte {
	m := hmac.New(sha256.New, s.key)
	fmt.Fprintf(m, "v1\n%s\n%s\n%d", runID, key, exp)
	return m.Sum(nil)
}
