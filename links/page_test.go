package links

import (
	"errors"
	"net/url"
	"testing"
	"time"
)

// TestPageRoundTrip: a page token opens its run's page until it expires, also
// after a trip through a URL, and names its expiry.
func TestPageRoundTrip(t *testing.T) {
	s := signer(t, "0123456789abcdef0123456789abcdef")
	now := time.Unix(1_800_000_000, 0)
	exp := now.Add(30 * 24 * time.Hour)
	q := s.SignPage(run, exp)
	u, _ := url.Parse("https://ac.example/runs/" + run + "?" + q.Encode())
	if err := s.VerifyPage(run, u.Query(), now); err != nil {
		t.Fatalf("fresh page token: %v", err)
	}
	if err := s.VerifyPage(run, q, exp.Add(-time.Second)); err != nil {
		t.Fatalf("a second before expiry: %v", err)
	}
	for _, at := range []time.Time{exp, exp.Add(time.Hour)} {
		if err := s.VerifyPage(run, q, at); !errors.Is(err, ErrExpired) {
			t.Fatalf("at %v past expiry: %v, want ErrExpired", at.Sub(exp), err)
		}
	}
	if got, ok := Expires(q); !ok || !got.Equal(exp) {
		t.Fatalf("Expires = %v %v, want %v", got, ok, exp)
	}
}

// TestScopesAreSeparate: a token made for an artifact never opens a page and
// a page token never opens an artifact, whatever the artifact key (a key
// spelling the page scope's tag included); a page token opens no other run.
func TestScopesAreSeparate(t *testing.T) {
	s := signer(t, "0123456789abcdef0123456789abcdef")
	now := time.Unix(1_800_000_000, 0)
	exp := now.Add(time.Hour)
	page := s.SignPage(run, exp)
	keys := []string{key, "", "page", "page-v1", "v1", run, "page-v1\n" + run}
	for _, k := range keys {
		if err := s.VerifyPage(run, s.Sign(run, k, exp), now); err == nil {
			t.Errorf("an artifact token for key %q opened the page", k)
		}
		if err := s.Verify(run, k, page, now); err == nil {
			t.Errorf("the page token opened the artifact %q", k)
		}
	}
	cases := []struct {
		name string
		run  string
		q    url.Values
		want error
	}{
		{"another run's page token", run, s.SignPage("0198c0de-ruo", exp), ErrBadSignature},
		{"on another run", "0198c0de-ruo", page, ErrBadSignature},
		{"made with another secret", run, signer(t, "fedcba9876543210fedcba9876543210").SignPage(run, exp), ErrBadSignature},
		{"exp moved later", run, url.Values{ParamExpires: {"1800007200"}, ParamSignature: page[ParamSignature]}, ErrBadSignature},
		{"an artifact token for the key page", run, s.Sign(run, "page", exp), ErrBadSignature},
		{"no sig", run, url.Values{ParamExpires: page[ParamExpires]}, ErrMalformed},
		{"run id with a newline", run + "\n1", page, ErrMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := s.VerifyPage(c.run, c.q, now); !errors.Is(err, c.want) {
				t.Fatalf("VerifyPage = %v, want %v", err, c.want)
			}
		})
	}
	// An expired token that is not ours is a bad signature, not "expired".
	late := exp.Add(time.Hour)
	if err := s.VerifyPage(run, s.Sign(run, "page", exp), late); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("an expired artifact token on the page: %v, want ErrBadSignature", err)
	}
}
