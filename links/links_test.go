package links

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"
)

func signer(t *testing.T, key string) *Signer {
	t.Helper()
	s, err := NewSigner([]byte(key))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const (
	run = "0198c0de-run"
	key = "2026/05/01/VLLMHighTTFT/0198c0de-run/vllm/snapshot/prometheus.json"
)

func TestRoundTrip(t *testing.T) {
	s := signer(t, "0123456789abcdef0123456789abcdef")
	now := time.Unix(1_800_000_000, 0)
	q := s.Sign(run, key, now.Add(time.Hour))
	if err := s.Verify(run, key, q, now); err != nil {
		t.Fatalf("fresh token: %v", err)
	}
	// Through a URL and back, as a click brings it.
	u, _ := url.Parse("https://ac.example/artifacts/x?" + q.Encode())
	if err := s.Verify(run, key, u.Query(), now.Add(59*time.Minute)); err != nil {
		t.Fatalf("parsed back: %v", err)
	}
	if strings.Contains(q.Encode(), "0123456789abcdef") {
		t.Fatalf("token carries the key: %s", q.Encode())
	}
}

func TestTampered(t *testing.T) {
	s := signer(t, "0123456789abcdef0123456789abcdef")
	now := time.Unix(1_800_000_000, 0)
	exp := now.Add(time.Hour)
	good := s.Sign(run, key, exp)
	other := signer(t, "fedcba9876543210fedcba9876543210")
	flip := func(sig string) string {
		b := []byte(sig)
		if b[3] == 'A' {
			b[3] = 'B'
		} else {
			b[3] = 'A'
		}
		return string(b)
	}
	cases := []struct {
		name     string
		run, key string
		q        url.Values
		want     error
	}{
		{"other run", "0198c0de-ruo", key, good, ErrBadSignature},
		{"other key", run, strings.Replace(key, "prometheus", "scrape", 1), good, ErrBadSignature},
		{"longer exp", run, key, url.Values{ParamExpires: {"1800007200"}, ParamSignature: good[ParamSignature]}, ErrBadSignature},
		{"flipped sig", run, key, url.Values{ParamExpires: good[ParamExpires], ParamSignature: {flip(good.Get(ParamSignature))}}, ErrBadSignature},
		{"other secret", run, key, other.Sign(run, key, exp), ErrBadSignature},
		{"no sig", run, key, url.Values{ParamExpires: good[ParamExpires]}, ErrMalformed},
		{"no exp", run, key, url.Values{ParamSignature: good[ParamSignature]}, ErrMalformed},
		{"exp not a number", run, key, url.Values{ParamExpires: {"1e9"}, ParamSignature: good[ParamSignature]}, ErrMalformed},
		{"exp with a leading zero", run, key, url.Values{ParamExpires: {"0" + good.Get(ParamExpires)}, ParamSignature: good[ParamSignature]}, ErrMalformed},
		{"sig not base64url", run, key, url.Values{ParamExpires: good[ParamExpires], ParamSignature: {"!!!"}}, ErrMalformed},
		{"two sigs", run, key, url.Values{ParamExpires: good[ParamExpires], ParamSignature: {good.Get(ParamSignature), "x"}}, ErrMalformed},
		{"newline split moved", run + "\n" + "2026", strings.TrimPrefix(key, "2026/"), good, ErrMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := s.Verify(c.run, c.key, c.q, now); !errors.Is(err, c.want) {
				t.Fatalf("Verify = %v, want %v", err, c.want)
			}
		})
	}
}

func TestExpired(t *testing.T) {
	s := signer(t, "0123456789abcdef0123456789abcdef")
	exp := time.Unix(1_800_000_000, 0)
	q := s.Sign(run, key, exp)
	if err := s.Verify(run, key, q, exp.Add(-time.Second)); err != nil {
		t.Fatalf("a second before: %v", err)
	}
	for _, at := range []time.Time{exp, exp.Add(time.Hour)} {
		if err := s.Verify(run, key, q, at); !errors.Is(err, ErrExpired) {
			t.Fatalf("at %v: %v, want ErrExpired", at.Sub(exp), err)
		}
	}
	// An expired token with a wrong signature is a bad signature, not expired.
	q2 := url.Values{ParamExpires: q[ParamExpires], ParamSignature: {strings.Repeat("A", 43)}}
	if err := s.Verify(run, key, q2, exp.Add(time.Hour)); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("forged expired: %v, want ErrBadSignature", err)
	}
}

func TestShortKeyRefused(t *testing.T) {
	if _, err := NewSigner([]byte("short")); err == nil {
		t.Fatal("a 5-byte key was taken")
	}
}
