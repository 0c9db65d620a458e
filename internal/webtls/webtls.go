// Package webtls serves the daemon's listener over TLS from config.TLS. The
// certificate, key and client CA are read at start and again on Reload
// (SIGHUP) or when their files change (Watch: cert-manager and kubelet swap
// the files of a mounted Secret), so a rotation needs no restart: every new
// handshake gets the current set, connections already open keep theirs. A
// reload that fails (a half-written pair, a bad CA) keeps the last good set.
package webtls

import (
	"context"
	"crypto/tls"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/internal/dirwatch"
)

// Server holds the listener's current TLS settings.
type Server struct {
	cfg config.TLS
	log *zap.Logger
	mu  sync.Mutex // serializes reloads
	cur atomic.Pointer[tls.Config]
	// Debounce coalesces a burst of file events into one reload.
	Debounce time.Duration
}

// New reads c's files once; an error here is a startup error naming the key
// at fault. A key file others may read is logged as a warning.
func New(c config.TLS, log *zap.Logger) (*Server, error) {
	s := &Server{cfg: c, log: log, Debounce: 200 * time.Millisecond}
	tc, err := s.load()
	if err != nil {
		return nil, fmt.Errorf("web.tls: %w", err)
	}
	s.cur.Store(tc)
	if c.KeyFileWorldReadable() {
		log.Warn("The TLS key file can be read by every user on this machine; make it 0600 (or 0640 for a group).",
			zap.String("key_file", c.KeyFile))
	}
	log.Info("TLS is on.", certFields(tc, c)...)
	return s, nil
}

// load reads the files into a fresh server config.
func (s *Server) load() (*tls.Config, error) {
	pair, err := s.cfg.LoadKeyPair()
	if err != nil {
		return nil, err
	}
	cas, err := s.cfg.LoadClientCAs()
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		Certificates: []tls.Certificate{pair},
		ClientAuth:   s.cfg.TLSClientAuth(),
		ClientCAs:    cas,
		MinVersion:   s.cfg.TLSMinVersion(),
		NextProtos:   []string{"http/1.1"},
	}, nil
}

// Config is what the listener serves with: each handshake takes the
// settings current at that moment.
func (s *Server) Config() *tls.Config {
	return &tls.Config{
		MinVersion: s.cfg.TLSMinVersion(), // also checked by the config returned below
		NextProtos: []string{"http/1.1"},  // the server is served as HTTP/1.1 (Alertmanager speaks it)
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.cur.Load(), nil
		},
	}
}

// Reload reads the files again; on an error the current set stays and the
// error is logged and returned.
func (s *Server) Reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	tc, err := s.load()
	if err != nil {
		s.log.Error("Cannot reload the TLS certificate; the previous one is still served.", zap.Error(err))
		return fmt.Errorf("web.tls: %w", err)
	}
	s.cur.Store(tc)
	s.log.Info("TLS certificate reloaded.", certFields(tc, s.cfg)...)
	return nil
}

// Watch reloads when a file in the folders of the certificate, key or client
// CA changes, until ctx ends. It watches folders, not files: a mounted
// Secret is updated by swapping a symlink, which a watch on the file misses.
func (s *Server) Watch(ctx context.Context) error {
	var dirs []string
	for _, f := range []string{s.cfg.CertFile, s.cfg.KeyFile, s.cfg.ClientCAFile} {
		if f != "" {
			dirs = append(dirs, filepath.Dir(f))
		}
	}
	return dirwatch.Run(ctx, dirwatch.Options{Name: "web.tls", Dirs: dirs, Debounce: s.Debounce, Log: s.log,
		Reload: func() { _ = s.Reload() }}) // logged; the previous set stays on error
}

// certFields describe the served leaf for the log.
func certFields(tc *tls.Config, c config.TLS) []zap.Field {
	f := []zap.Field{zap.String("cert_file", c.CertFile), zap.String("client_auth", c.ClientAuthMode())}
	if len(tc.Certificates) > 0 && tc.Certificates[0].Leaf != nil {
		l := tc.Certificates[0].Leaf
		f = append(f, zap.String("serial", l.SerialNumber.String()), zap.Time("not_after", l.NotAfter))
	}
	return f
}
