package main

import (
	"net"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/handlers"
	"github.com/autocapture/autocapture/links"
	"github.com/autocapture/autocapture/runner"
	"github.com/autocapture/autocapture/runner/artifacts"
	"github.com/autocapture/autocapture/vocab"
)

// threadLinks is how threads link artifacts, from web.* and storage.links.
// In route mode without web.external_url the links fall back to the listen
// address when a reader can open it (a concrete host or loopback address),
// else a thread has none; either way the daemon says once to set it.
func threadLinks(cfg *config.Config, env *vocab.Env, log *zap.Logger) artifacts.ThreadLinks {
	tl := artifacts.ThreadLinks{Mode: cfg.Storage.Links, BaseURL: cfg.Web.ExternalURL, TTL: cfg.Web.LinkTTL,
		Secret: []byte(strings.TrimSpace(cfg.Web.LinkSecret.Reveal()))}
	if tl.Mode == config.LinksRoute && tl.BaseURL == "" {
		tl.BaseURL = listenURL(cfg.Web.ListenAddress)
		if tl.BaseURL != "" && cfg.Web.TLS.Enabled() { // the listener speaks only TLS
			tl.BaseURL = "https" + strings.TrimPrefix(tl.BaseURL, "http")
		}
		if tl.BaseURL != "" {
			log.Warn("web.external_url is not set: artifact links in threads point at the listen address, which only this machine's network may reach; set web.external_url to how readers reach this daemon.",
				zap.String("links_to", tl.BaseURL))
		} else {
			log.Warn("web.external_url is not set and the listen address is no address a reader can open: threads carry no artifact links; set web.external_url to how readers reach this daemon.",
				zap.String("listen_address", cfg.Web.ListenAddress))
		}
	}
	return tl
}

// listenURL is http://host:port of a listen address naming one host, empty
// for a wildcard (0.0.0.0, ::, no host) or a port 0.
func listenURL(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil || host == "" || port == "" || port == "0" {
		return ""
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.IsUnspecified() {
		return ""
	}
	return "http://" + net.JoinHostPort(host, port)
}

// pageLinks signs the Slack parent's "Run page" links with the run
// service's link key (web.link_secret, else the key kept in the database),
// which runner.Open reads after the notifiers it takes are built; it is set
// before the service starts, so before any thread is delivered. Unset, it
// signs nothing and the link goes without a token (the page then asks for
// a sign-in).
type pageLinks struct{ s atomic.Pointer[links.Signer] }

func (p *pageLinks) set(s *links.Signer) { p.s.Store(s) }

// SignPage signs a link to run runID's page valid until exp.
func (p *pageLinks) SignPage(runID string, exp time.Time) url.Values {
	if s := p.s.Load(); s != nil {
		return s.SignPage(runID, exp)
	}
	return nil
}

// artifactRoute is the /artifacts route's wiring: the run service knows
// which keys each run recorded and holds the link key; S3 redirects.
func artifactRoute(cfg *config.Config, env *vocab.Env, svc *runner.Service) *handlers.ArtifactOptions {
	if env == nil || env.Store == nil {
		return nil
	}
	return &handlers.ArtifactOptions{Runs: svc, Store: env.Store, Links: svc.Signer(), Redirect: cfg.Storage.Backend == config.BackendS3}
}
