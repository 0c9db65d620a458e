package main

import (
	"context"
	"net"

	"crypto/tls"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/internal/webtls"
)

// listenTLS wraps ln in TLS when web.tls is set, and returns the reload that
// SIGHUP runs (a no-op without TLS). The files are also watched until ctx
// ends, so a rotated certificate is served without a signal.
func listenTLS(ctx context.Context, c config.TLS, ln net.Listener, log *zap.Logger) (net.Listener, func() error, error) {
	if !c.Enabled() {
		return ln, func() error { return nil }, nil
	}
	log = log.Named("tls")
	s, err := webtls.New(c, log)
	if err != nil {
		return nil, nil, err
	}
	go func() {
		if err := s.Watch(ctx); err != nil {
			log.Warn("Cannot watch the TLS files; SIGHUP still reloads them.", zap.Error(err))
		}
	}()
	return tls.NewListener(ln, s.Config()), s.Reload, nil
}
