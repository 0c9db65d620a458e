package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"

	"github.com/autocapture/autocapture/config"
)

// tlsFlags is how healthcheck trusts an https daemon, in this order:
// --tls.ca-file (verify the chain and the host name against those CAs);
// --tls.insecure-skip-verify (no verification, refused unless the host is
// loopback); the config's web.tls.cert_file when the URL came from
// --config.file (the daemon must present exactly that certificate); else
// the system's roots. --tls.cert-file and --tls.key-file present a client
// certificate, which a daemon with web.tls.client_ca_file requires.
type tlsFlags struct {
	caFile, certFile, keyFile string
	skipVerify                bool
	pinFile                   string // set from the config, not a flag
}

// config builds the client's TLS settings for a daemon at host.
func (f tlsFlags) config(host string) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if (f.certFile == "") != (f.keyFile == "") {
		return nil, errors.New("--tls.cert-file and --tls.key-file go together")
	}
	if f.certFile != "" {
		pair, err := tls.LoadX509KeyPair(f.certFile, f.keyFile)
		if err != nil {
			return nil, fmt.Errorf("--tls.cert-file/--tls.key-file: %w", err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	switch {
	case f.caFile != "":
		b, err := os.ReadFile(f.caFile)
		if err != nil {
			return nil, fmt.Errorf("--tls.ca-file: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("--tls.ca-file: %q holds no PEM certificate", f.caFile)
		}
	case f.skipVerify:
		if !config.IsLoopbackHost(host) {
			return nil, fmt.Errorf("--tls.insecure-skip-verify is only for a loopback host, not %q: give --tls.ca-file", host)
		}
		tc.InsecureSkipVerify = true
	case f.pinFile != "":
		leaf, err := firstCertDER(f.pinFile)
		if err != nil {
			return nil, fmt.Errorf("web.tls.cert_file: %w", err)
		}
		// The chain is not verified by name: the pin is the whole check.
		tc.InsecureSkipVerify = true
		tc.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 || !bytes.Equal(raw[0], leaf) {
				return fmt.Errorf("the daemon's certificate is not the one in web.tls.cert_file %q", f.pinFile)
			}
			return nil
		}
	}
	return tc, nil
}

// firstCertDER is the first certificate of a PEM file.
func firstCertDER(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	for {
		var blk *pem.Block
		if blk, b = pem.Decode(b); blk == nil {
			return nil, fmt.Errorf("%q holds no PEM certificate", path)
		}
		if blk.Type == "CERTIFICATE" {
			return blk.Bytes, nil
		}
	}
}
