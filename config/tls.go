package config

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
)

// TLS is the listener's optional TLS: a server certificate and key (PEM
// files, reloaded on SIGHUP and when they change, as cert-manager rotates
// them) and, optionally, client certificates verified against a CA.
//
// A verified client certificate names who acted in the API (its subject CN)
// and is required in addition to web.auth unless ClientCertAuthenticates
// says it is enough.
type TLS struct {
	// CertFile is the server certificate chain (PEM); setting it (with
	// key_file) turns TLS on. Both are read at startup (missing, unreadable
	// or mismatched: a startup error naming the key; a cert without a key
	// too) and again on SIGHUP and when a file in their folders changes
	// (cert-manager's rotation: no restart, each new connection gets the new
	// certificate, a broken pair is logged and the old one stays).
	CertFile string `yaml:"cert_file" json:"cert_file"`
	// KeyFile is CertFile's private key (PEM). A key file every user may read
	// is a startup warning, not an error (Kubernetes mounts Secrets 0644 by
	// default).
	KeyFile string `yaml:"key_file" json:"key_file"`
	// ClientCAFile holds the CA certificates client certificates must chain
	// to. The subject CN of a verified client certificate is the "by" of
	// profiling pauses, resumes and stops in the API (without one: the
	// basic-auth user, else the remote address).
	ClientCAFile string `yaml:"client_ca_file" json:"client_ca_file"`
	// ClientAuth says what is asked of a client: none, request (a
	// certificate is asked for and verified when one is given, never trusted
	// unverified) or require_and_verify (the default when ClientCAFile is
	// set: a connection without a valid one fails its handshake).
	ClientAuth string `yaml:"client_auth" json:"client_auth"`
	// MinVersion is the lowest TLS version accepted: TLS1.2 (default) or
	// TLS1.3; TLS 1.0 and 1.1 are refused.
	MinVersion string `yaml:"min_version" json:"min_version"`
	// ClientCertAuthenticates lets a verified client certificate stand in
	// for web.auth's token or password, and satisfy the guard on listening
	// beyond loopback without auth. Off (the default): a client certificate
	// is required in addition to them (a certificate proves the caller holds
	// a key the CA signed; the token still says it may start captures).
	ClientCertAuthenticates bool `yaml:"client_cert_authenticates" json:"client_cert_authenticates"`
}

// Client authentication modes of web.tls.client_auth.
const (
	ClientAuthNone             = "none"
	ClientAuthRequest          = "request"
	ClientAuthRequireAndVerify = "require_and_verify"
)

// Enabled says whether the listener speaks TLS.
func (t TLS) Enabled() bool { return t.CertFile != "" || t.KeyFile != "" }

// ClientAuthMode is ClientAuth with its default applied.
func (t TLS) ClientAuthMode() string {
	if t.ClientAuth != "" {
		return t.ClientAuth
	}
	if t.ClientCAFile != "" {
		return ClientAuthRequireAndVerify
	}
	return ClientAuthNone
}

// TLSClientAuth is the crypto/tls policy of ClientAuthMode. "request"
// verifies a certificate that is given (never trusts one unverified).
func (t TLS) TLSClientAuth() tls.ClientAuthType {
	switch t.ClientAuthMode() {
	case ClientAuthRequest:
		return tls.VerifyClientCertIfGiven
	case ClientAuthRequireAndVerify:
		return tls.RequireAndVerifyClientCert
	}
	return tls.NoClientCert
}

// TLSMinVersion is MinVersion as a crypto/tls version, TLS 1.2 by default.
func (t TLS) TLSMinVersion() uint16 {
	if v, ok := tlsVersions[t.MinVersion]; ok {
		return v
	}
	return tls.VersionTLS12
}

var tlsVersions = map[string]uint16{"": tls.VersionTLS12, "TLS1.2": tls.VersionTLS12, "TLS12": tls.VersionTLS12,
	"TLS1.3": tls.VersionTLS13, "TLS13": tls.VersionTLS13}

// LoadClientCAs reads ClientCAFile into a pool; nil when it is unset.
func (t TLS) LoadClientCAs() (*x509.CertPool, error) {
	if t.ClientCAFile == "" {
		return nil, nil
	}
	b, err := os.ReadFile(t.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("client_ca_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("client_ca_file: %q holds no PEM certificate", t.ClientCAFile)
	}
	return pool, nil
}

// LoadKeyPair reads CertFile and KeyFile; errors name the key at fault,
// never the key's content.
func (t TLS) LoadKeyPair() (tls.Certificate, error) {
	if _, err := os.Stat(t.CertFile); err != nil {
		return tls.Certificate{}, fmt.Errorf("cert_file: %w", err)
	}
	if _, err := os.Stat(t.KeyFile); err != nil {
		return tls.Certificate{}, fmt.Errorf("key_file: %w", err)
	}
	c, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("cert_file %q and key_file %q: %w", t.CertFile, t.KeyFile, err)
	}
	return c, nil
}

// KeyFileWorldReadable says whether others on the machine may read KeyFile.
// It is a warning, not an error: Kubernetes mounts Secrets 0644 by default,
// where no other user shares the container.
func (t TLS) KeyFileWorldReadable() bool {
	fi, err := os.Stat(t.KeyFile)
	return err == nil && fi.Mode().Perm()&0o004 != 0
}

// checkTLS validates web.tls's shape; checkTLSFiles reads its files.
func (v *validator) checkTLS(t TLS) {
	const p = "$.web.tls"
	if !t.Enabled() {
		if t.ClientCAFile != "" || t.ClientAuth != "" || t.ClientCertAuthenticates {
			v.errorf(p, "client certificates need TLS: set cert_file and key_file")
		}
		return
	}
	if t.CertFile == "" {
		v.errorf(p+".key_file", "set without cert_file")
	}
	if t.KeyFile == "" {
		v.errorf(p+".cert_file", "set without key_file")
	}
	if _, ok := tlsVersions[t.MinVersion]; !ok {
		v.errorf(p+".min_version", "want TLS1.2 or TLS1.3, got %q (older versions are refused)", t.MinVersion)
	}
	switch mode := t.ClientAuthMode(); mode {
	case ClientAuthNone:
		if t.ClientCAFile != "" {
			v.errorf(p+".client_auth", "none with client_ca_file set: remove one (client_auth defaults to require_and_verify with a CA)")
		}
		if t.ClientCertAuthenticates {
			v.errorf(p+".client_cert_authenticates", "set with client_auth none: no client certificate is asked for")
		}
	case ClientAuthRequest, ClientAuthRequireAndVerify:
		if t.ClientCAFile == "" {
			v.errorf(p+".client_auth", "%s needs client_ca_file (the CA client certificates are verified against)", mode)
		}
	default:
		v.errorf(p+".client_auth", "want none, request or require_and_verify, got %q", t.ClientAuth)
	}
}

// checkTLSFiles reads web.tls's files once at load, so a missing or
// unreadable one is a startup error naming its key.
func (v *validator) checkTLSFiles(t TLS) {
	const p = "$.web.tls"
	if t.CertFile == "" || t.KeyFile == "" {
		return
	}
	if _, err := t.LoadKeyPair(); err != nil {
		key := p + ".cert_file"
		if _, serr := os.Stat(t.KeyFile); serr != nil || isKeyError(t.KeyFile) {
			key = p + ".key_file"
		}
		v.errorf(key, "%v", err)
	}
	if _, err := t.LoadClientCAs(); err != nil {
		v.errorf(p+".client_ca_file", "%v", err)
	}
}

// isKeyError says whether path does not hold a PEM private key, so a pair
// that fails to load is reported at the key rather than the certificate.
func isKeyError(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return true
	}
	blk, _ := pem.Decode(b)
	return blk == nil
}
