package handlers

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/config"
)

// authenticator checks what Alertmanager's http_config sends: a bearer token
// (authorization.credentials) or basic auth. Either configured method is enough.
// Secrets are compared as SHA-256 digests in constant time, so neither their
// content nor their length leaks through timing.
//
// With certs set, a verified TLS client certificate is enough on its own
// (web.tls.client_cert_authenticates); the TLS layer did the verifying.
//
// It is never "on" with nothing to compare: auth that is configured but holds no
// usable credential (a _file twin read empty, basic auth without a password)
// leaves enabled set with no method, and every request is refused.
type authenticator struct {
	enabled  bool
	token    *[32]byte
	user     *[32]byte
	password *[32]byte
	certs    bool
}

func newAuthenticator(a config.Auth, certs bool) *authenticator {
	au := &authenticator{certs: certs}
	if !a.BearerToken.Blank() {
		d := sha256.Sum256([]byte(a.BearerToken.Reveal()))
		au.token = &d
	}
	if b := a.BasicAuth; b != nil && b.Username != "" && !b.Password.Blank() {
		u, p := sha256.Sum256([]byte(b.Username)), sha256.Sum256([]byte(b.Password.Reveal()))
		au.user, au.password = &u, &p
	}
	// Configured at all (even with nothing usable) means on: such an
	// authenticator refuses everything (check), never lets all through.
	au.enabled = a.BearerToken != "" || a.BearerTokenFile != "" || a.BasicAuth != nil || certs
	return au
}

// check says whether r carries valid credentials, and if not, why (for the log;
// never containing what was sent).
func (a *authenticator) check(r *http.Request) (bool, string) {
	if a.certs && verifiedClient(r) {
		return true, ""
	}
	if a.token == nil && a.user == nil && a.certs {
		return false, "no verified client certificate"
	}
	if a.token == nil && a.user == nil {
		return false, "auth is configured without a usable credential (empty token or password): every request is refused"
	}
	h := r.Header.Get("Authorization")
	if h == "" {
		return false, "no Authorization header"
	}
	scheme, cred, _ := strings.Cut(h, " ")
	switch {
	case strings.EqualFold(scheme, "Bearer") && a.token != nil:
		if equalDigest(a.token, strings.TrimSpace(cred)) {
			return true, ""
		}
		return false, "wrong bearer token"
	case strings.EqualFold(scheme, "Basic") && a.user != nil:
		u, p, ok := r.BasicAuth()
		if !ok {
			return false, "malformed basic auth"
		}
		// Evaluate both so a wrong user costs the same as a wrong password.
		uok, pok := equalDigest(a.user, u), equalDigest(a.password, p)
		if uok && pok {
			return true, ""
		}
		return false, "wrong basic auth credentials"
	}
	return false, "unsupported or unconfigured authorization scheme"
}

// verifiedClient says whether r came over TLS with a client certificate
// that crypto/tls verified against web.tls.client_ca_file.
func verifiedClient(r *http.Request) bool {
	return r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0
}

// clientCN is the subject CN of r's verified client certificate, or "".
// An unverified certificate names nobody.
func clientCN(r *http.Request) string {
	if !verifiedClient(r) {
		return ""
	}
	return r.TLS.VerifiedChains[0][0].Subject.CommonName
}

func equalDigest(want *[32]byte, got string) bool {
	d := sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(want[:], d[:]) == 1
}

// requireAuth answers 401 unless the request is authenticated; with no auth
// configured it lets everything through (config refuses that beyond loopback).
// The trusted proxy's header is not enough here: it reaches only the pages.
func (s *Server) requireAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.auth.enabled {
			next.ServeHTTP(w, r)
			return
		}
		ok, why := s.auth.check(r)
		if ok {
			next.ServeHTTP(w, r)
			return
		}
		if s.proxy != nil {
			if user, _ := s.proxy.user(r); user != "" {
				why += "; the trusted proxy's " + s.proxy.header + " authenticates only the run pages"
			}
		}
		s.unauthorized(w, r, why)
	})
}

// admitReader is requireAuth for what the pages show (the artifact route
// without a token): web.auth or its trusted proxy. It says whether r may
// read, having answered 401 if not.
func (s *Server) admitReader(w http.ResponseWriter, r *http.Request) bool {
	ok, why := s.signedIn(r)
	if !ok {
		s.unauthorized(w, r, why)
	}
	return ok
}

// unauthorized logs why and answers 401 with a challenge.
func (s *Server) unauthorized(w http.ResponseWriter, r *http.Request, why string) {
	s.log.Warn("Request refused: not authenticated.", zap.String("path", r.URL.Path),
		zap.String("remote", clientIP(r)), zap.String("why", why))
	if s.auth.token != nil || s.auth.user == nil {
		w.Header().Set("WWW-Authenticate", `Bearer realm="autocapture"`)
	} else {
		w.Header().Set("WWW-Authenticate", `Basic realm="autocapture"`)
	}
	fail(w, http.StatusUnauthorized, "unauthorized", "missing or wrong credentials")
}
