// Package links signs and verifies the links a thread carries: a URL under
// web.external_url that the daemon serves without the API's credentials when
// it carries a valid token. A token is an expiry and an HMAC-SHA256 over a
// versioned message; it never carries the key it was made with.
//
// A token has one scope, named by the first line of the message it signs:
//
//   - an artifact token ("v1", Sign and Verify) opens exactly one key of one
//     run at the artifact route (served, or redirected to a fresh presigned URL);
//   - a page token ("page-v1", SignPage and VerifyPage) opens exactly one run's
//     page (GET/HEAD /runs/{id}): the Slack parent's "Run page" button.
//
// Run ids and keys hold no newline, so the first line is always the scope tag
// and no message of one scope equals a message of the other: an artifact
// token, whatever its key ("page" included), never opens a page, and a page
// token never opens an artifact.
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
	return s.token(exp, func(e int64) string { return artifactMessage(runID, key, e) })
}

// Verify checks that q holds a token Sign made for exactly runID and key,
// unexpired at now. The signature is checked first and in constant time: an
// expired answer is only given for a token that is ours, so a forged one
// learns nothing from which error it gets.
func (s *Signer) Verify(runID, key string, q url.Values, now time.Time) error {
	if strings.Contains(runID, "\n") || strings.Contains(key, "\n") {
		return ErrMalformed // Sign never made one: the message would be ambiguous
	}
	return s.verify(q, now, func(e int64) string { return artifactMessage(runID, key, e) })
}

// SignPage returns the token that lets the holder read run runID's page
// (GET/HEAD /runs/{id}, read-only) until exp: the same exp and sig
// parameters as an artifact token, in the page scope.
func (s *Signer) SignPage(runID string, exp time.Time) url.Values {
	return s.token(exp, func(e int64) string { return pageMessage(runID, e) })
}

// VerifyPage checks that q holds a token SignPage made for exactly runID,
// unexpired at now, with Verify's errors and order (signature first).
func (s *Signer) VerifyPage(runID string, q url.Values, now time.Time) error {
	if strings.Contains(runID, "\n") {
		return ErrMalformed
	}
	return s.verify(q, now, func(e int64) string { return pageMessage(runID, e) })
}

// Expires is the expiry a token in q names, for telling a reader until when
// a link worked: trust it only once Verify or VerifyPage said ErrExpired (or
// nil), which means the signature covering it matched.
func Expires(q url.Values) (time.Time, bool) {
	e, err := strconv.ParseInt(q.Get(ParamExpires), 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(e, 0), true
}

func (s *Signer) token(exp time.Time, msg func(int64) string) url.Values {
	e := exp.Unix()
	return url.Values{
		ParamExpires:   {strconv.FormatInt(e, 10)},
		ParamSignature: {base64.RawURLEncoding.EncodeToString(s.mac(msg(e)))},
	}
}

func (s *Signer) verify(q url.Values, now time.Time, msg func(int64) string) error {
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
	if !hmac.Equal(got, s.mac(msg(e))) {
		return ErrBadSignature
	}
	if now.Unix() >= e {
		return ErrExpired
	}
	return nil
}

// The versioned messages, one per scope; the first line names the scope.
// Run ids and keys hold no newline (storage.ValidKey refuses control
// characters, Verify and VerifyPage any newline), so each is unambiguous and
// no message of one scope is a message of the other.
func artifactMessage(runID, key string, exp int64) string {
	return fmt.Sprintf("v1\n%s\n%s\n%d", runID, key, exp)
}

func pageMessage(runID string, exp int64) string {
	return fmt.Sprintf("page-v1\n%s\n%d", runID, exp)
}

func (s *Signer) mac(msg string) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}
