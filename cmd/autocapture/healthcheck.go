package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/autocapture/autocapture/config"
)

func init() {
	register("healthcheck", command{summary: "probe a running daemon's /-/healthy (the image's HEALTHCHECK)", run: runHealthcheck})
}

// runHealthcheck asks a daemon whether it is alive: exit 0 on a 2xx answer,
// 1 on anything else (an error status, no answer within --timeout), 2 on bad
// usage. The image has no shell or curl, so its HEALTHCHECK runs this.
//
// The URL is --url, else /-/healthy on the daemon --config.file configures
// (its web.listen_address, a wildcard host probed on loopback), so a mounted
// config with another port is followed without editing the HEALTHCHECK.
// A config with web.tls is probed over https, trusting exactly the
// certificate in its web.tls.cert_file (what this daemon serves: no CA or
// host name is needed on loopback); see tlsFlags for the rest.
func runHealthcheck(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("healthcheck", "[--url U | --config.file F] [--timeout D] [--tls.* …]", stdout, stderr)
	rawURL := fs.String("url", "", "URL to GET (default: /-/healthy on the daemon --config.file configures)")
	cfgFile := fs.String("config.file", "", "daemon config whose web.listen_address to probe (default: embedded defaults, 127.0.0.1:9095)")
	timeout := fs.Duration("timeout", 5*time.Second, "give up after this long")
	var tf tlsFlags
	fs.StringVar(&tf.caFile, "tls.ca-file", "", "verify an https daemon against these CA certificates (default: the system's; with --config.file, the config's own web.tls.cert_file is trusted)")
	fs.StringVar(&tf.certFile, "tls.cert-file", "", "client certificate to present (a daemon with web.tls.client_ca_file needs one)")
	fs.StringVar(&tf.keyFile, "tls.key-file", "", "key of --tls.cert-file")
	fs.BoolVar(&tf.skipVerify, "tls.insecure-skip-verify", false, "do not verify the daemon's certificate; only for a loopback host")
	if code, done := fs.parse(args); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "healthcheck: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *timeout <= 0 {
		fmt.Fprintf(stderr, "healthcheck: --timeout must be positive, got %s\n", *timeout)
		return 2
	}
	target := *rawURL
	if target == "" {
		cfg, err := config.Load(*cfgFile)
		if err != nil {
			fmt.Fprintf(stderr, "healthcheck: %v\n", err)
			return 2
		}
		if target, err = healthURL(cfg.Web.ListenAddress, cfg.Web.TLS.Enabled()); err != nil {
			fmt.Fprintf(stderr, "healthcheck: %v\n", err)
			return 2
		}
		if cfg.Web.TLS.Enabled() {
			tf.pinFile = cfg.Web.TLS.CertFile
		}
	}
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		fmt.Fprintf(stderr, "healthcheck: --url %q is not an http(s) URL\n", target)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		fmt.Fprintf(stderr, "healthcheck: %v\n", err)
		return 2
	}
	client := http.DefaultClient
	if u.Scheme == "https" {
		tc, err := tf.config(u.Hostname())
		if err != nil {
			fmt.Fprintf(stderr, "healthcheck: %v\n", err)
			return 2
		}
		client = &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	}
	resp, err := client.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "healthcheck: %s: %v\n", u.Redacted(), err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		fmt.Fprintf(stderr, "healthcheck: %s: %s %q\n", u.Redacted(), resp.Status, body)
		return 1
	}
	fmt.Fprintf(stdout, "ok: %s %s\n", u.Redacted(), resp.Status)
	return 0
}

// healthURL is /-/healthy on a daemon listening on addr (https when it
// serves TLS); a wildcard or empty host (0.0.0.0, ::, ":9095") is reached on
// loopback.
func healthURL(addr string, https bool) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("web.listen_address %q: %w", addr, err)
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	scheme := "http://"
	if https {
		scheme = "https://"
	}
	return scheme + net.JoinHostPort(host, port) + "/-/healthy", nil
}
