package handlers

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/http/httptest"
	"testing"

	"github.com/autocapture/autocapture/config"
)

// TestClientCertAuth: a verified client certificate authenticates only when
// certs is set, and then names its CN; one crypto/tls did not verify (only
// in PeerCertificates) names nobody and authenticates nothing.
func TestClientCertAuth(t *testing.T) {
	alice := &x509.Certificate{Subject: pkix.Name{CommonName: "alice"}}
	verified := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{alice}, VerifiedChains: [][]*x509.Certificate{{alice}}}
	unverified := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{alice}}
	token := config.Auth{BearerToken: "t"}
	cases := []struct {
		name   string
		auth   config.Auth
		certs  bool
		state  *tls.ConnectionState
		bearer string
		ok     bool
		cn     string
	}{
		{"verified, certs enough", config.Auth{}, true, verified, "", true, "alice"},
		{"verified, token also required", token, false, verified, "", false, "alice"},
		{"verified and the token", token, false, verified, "t", true, "alice"},
		{"unverified, certs enough", config.Auth{}, true, unverified, "", false, ""},
		{"unverified, the token", token, true, unverified, "t", true, ""},
		{"no TLS, certs enough", config.Auth{}, true, nil, "", false, ""},
		{"no TLS, wrong token", token, true, nil, "x", false, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := newAuthenticator(c.auth, c.certs)
			if !a.enabled {
				t.Fatal("authenticator off")
			}
			r := httptest.NewRequest("GET", "/api/v1/runs", nil)
			r.TLS = c.state
			if c.bearer != "" {
				r.Header.Set("Authorization", "Bearer "+c.bearer)
			}
			if ok, why := a.check(r); ok != c.ok {
				t.Errorf("check = %v (%s), want %v", ok, why, c.ok)
			}
			if got := clientCN(r); got != c.cn {
				t.Errorf("clientCN = %q, want %q", got, c.cn)
			}
		})
	}
}
