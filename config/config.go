// Package config is the daemon's own configuration: one YAML file decoded strictly,
// defaults from one value (Default), secrets that never print.
package config

import (
	"time"

	"github.com/autocapture/autocapture/storage"
)

// Config is the daemon's whole configuration. config.example.yaml documents every field.
type Config struct {
	Web       Web       `yaml:"web" json:"web"`
	Storage   Storage   `yaml:"storage" json:"storage"`
	Database  Database  `yaml:"database" json:"database"`
	Runs      Runs      `yaml:"runs" json:"runs"`
	Retention Retention `yaml:"retention" json:"retention"`
	Profiling Profiling `yaml:"profiling" json:"profiling"`
	Playbooks []string  `yaml:"playbooks" json:"playbooks"`
	// ShippedPlaybooks keeps the shipped vLLM playbooks under the files
	// Playbooks names (playbooks.Sources: a file's playbook of the same name
	// replaces a shipped one); false loads the files alone.
	ShippedPlaybooks bool       `yaml:"shipped_playbooks" json:"shipped_playbooks"`
	Prometheus       Prometheus `yaml:"prometheus" json:"prometheus"`
	Traces           Traces     `yaml:"traces" json:"traces"`
	Targets          Targets    `yaml:"targets" json:"targets"`
	Notify           Notify     `yaml:"notify" json:"notify"`
	Log              Log        `yaml:"log" json:"log"`
}

// Web is the HTTP listener and the webhook's guard.
type Web struct {
	ListenAddress string `yaml:"listen_address" json:"listen_address"`
	// ExternalURL is how people reach this daemon (links in threads).
	ExternalURL string `yaml:"external_url" json:"external_url"`
	// MaxBodyBytes caps a webhook body; larger gets 413.
	MaxBodyBytes int64 `yaml:"max_body_bytes" json:"max_body_bytes"`
	// AllowUnauthenticated lets a non-loopback listener run without webhook auth.
	AllowUnauthenticated bool `yaml:"allow_unauthenticated" json:"allow_unauthenticated"`
	Auth                 Auth `yaml:"auth" json:"auth"`
	// LinkSecret signs the artifact links in threads (HMAC-SHA256, at least
	// 16 bytes); empty: a key generated once and kept in the database, shared
	// by every replica.
	LinkSecret Secret `yaml:"link_secret" json:"link_secret"`
	// LinkSecretFile is the _file twin of LinkSecret.
	LinkSecretFile string `yaml:"link_secret_file" json:"link_secret_file"`
	// LinkTTL is how long an artifact link in a thread works.
	LinkTTL time.Duration `yaml:"link_ttl" json:"link_ttl"`
	// TLS serves the listener over TLS, optionally with client certificates.
	TLS TLS `yaml:"tls" json:"tls"`
}

// ClientCertAuth says whether a verified client certificate authenticates a
// request on its own (web.tls.client_cert_authenticates).
func (w Web) ClientCertAuth() bool { return w.TLS.Enabled() && w.TLS.ClientCertAuthenticates }

// Auth is what Alertmanager's http_config sends: a bearer token or basic auth.
// TrustedProxy adds a way for people, not Alertmanager: see its type.
type Auth struct {
	BearerToken     Secret     `yaml:"bearer_token" json:"bearer_token"`
	BearerTokenFile string     `yaml:"bearer_token_file" json:"bearer_token_file"`
	BasicAuth       *BasicAuth `yaml:"basic_auth" json:"basic_auth,omitempty"`
	// TrustedProxy lets a single sign-on proxy in front of the daemon
	// authenticate readers of the run pages; nil: off.
	TrustedProxy *TrustedProxy `yaml:"trusted_proxy" json:"trusted_proxy,omitempty"`
}

// Enabled says whether webhook auth holds a credential to compare: a token, or
// a username and password. A _file twin that was never read, or read empty, is
// not auth (the validator says so); a listener beyond loopback needs Enabled.
// TrustedProxy does not count: it authenticates readers of the run pages,
// never the webhook.
func (a Auth) Enabled() bool {
	if !a.BearerToken.Blank() {
		return true
	}
	b := a.BasicAuth
	return b != nil && b.Username != "" && !b.Password.Blank()
}

// BasicAuth is a username and password.
type BasicAuth struct {
	Username     string `yaml:"username" json:"username"`
	Password     Secret `yaml:"password" json:"password"`
	PasswordFile string `yaml:"password_file" json:"password_file"`
}

// Database chooses the run store: empty URL means SQLite under storage.path;
// postgres://… means PostgreSQL (several replicas may share it).
type Database struct {
	URL Secret `yaml:"url" json:"url"`
	// URLFile is the _file twin of URL.
	URLFile string `yaml:"url_file" json:"url_file"`
	// StartupWait is how long a starting daemon waits for PostgreSQL to
	// answer (a replica restarted during a failover) before it gives up,
	// whichever step of the start (connecting, migrating, starting the
	// queue) it goes away in; a server that answers with an error (no such
	// database, a bad password) ends the start at once. Default 1m; 0 does
	// not wait.
	StartupWait time.Duration `yaml:"startup_wait" json:"startup_wait"`
}

// Runs bounds and paces run execution.
type Runs struct {
	// MaxConcurrent caps runs executing at once in this process; the rest wait queued.
	MaxConcurrent int `yaml:"max_concurrent" json:"max_concurrent"`
	// MaxAttempts bounds how often a run is started (first try + resumes) before it fails.
	MaxAttempts int `yaml:"max_attempts" json:"max_attempts"`
	// DefaultTimeout bounds a run whose playbook sets none.
	DefaultTimeout time.Duration `yaml:"default_timeout" json:"default_timeout"`
	// HeartbeatInterval is how often the worker holding a run renews its lease.
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval" json:"heartbeat_interval"`
	// LeaseTimeout: a run whose heartbeat is older is taken over (after a crash).
	LeaseTimeout time.Duration `yaml:"lease_timeout" json:"lease_timeout"`
	// ShutdownGrace is how long running steps may finish after SIGTERM.
	ShutdownGrace time.Duration `yaml:"shutdown_grace" json:"shutdown_grace"`
	// Lookback is how far before the alert's start its window begins.
	Lookback time.Duration `yaml:"lookback" json:"lookback"`
	// AbandonGrace: a step still running this long after its deadline (it
	// ignores its context) is recorded as timed out and the run moves on.
	AbandonGrace time.Duration `yaml:"abandon_grace" json:"abandon_grace"`
	// MaxArtifactBytes caps what one run stores over all its steps and
	// attempts; 0 is unlimited. A put past it fails the step (too-large).
	MaxArtifactBytes int64 `yaml:"max_artifact_bytes" json:"max_artifact_bytes"`
	// Replica is this process's stable name: with storage.backend s3, the
	// artifacts it spools while the bucket is down wait in its own folder
	// (storage.path/spool) and are uploaded from its own queue
	// (autocapture_upload_<replica>); it starts the lease owner id, and a
	// resumed run's thread names replicas by it. Empty: the hostname, sanitized.
	Replica string `yaml:"replica" json:"replica"`
}

// Prometheus is the Prometheus the tier-1 queries go to.
type Prometheus struct {
	URL     string        `yaml:"url" json:"url"`
	Timeout time.Duration `yaml:"timeout" json:"timeout"`
}

// Traces is the trace backend tier 2 searches.
type Traces struct {
	// Backend is jaeger or tempo; empty URL disables tier 2.
	Backend string        `yaml:"backend" json:"backend"`
	URL     string        `yaml:"url" json:"url"`
	Service string        `yaml:"service" json:"service"`
	Timeout time.Duration `yaml:"timeout" json:"timeout"`
}

// Targets is the allow-list for addresses taken from alert labels.
type Targets struct {
	// Allow holds hosts, host:port, CIDRs and :port entries.
	Allow []string `yaml:"allow" json:"allow"`
	// FromPrometheus also allows any instance Prometheus currently scrapes.
	FromPrometheus bool `yaml:"from_prometheus" json:"from_prometheus"`
}

// Notify chooses where threads go: the console (the default), Slack, or both.
type Notify struct {
	Console Console `yaml:"console" json:"console"`
	Slack   Slack   `yaml:"slack" json:"slack"`
	Storm   Storm   `yaml:"storm" json:"storm"`
}

// Console is the stdout notifier.
type Console struct {
	Enabled bool `yaml:"enabled" json:"enabled"`
}

// Log sets the daemon's logger.
type Log struct {
	Level  string `yaml:"level" json:"level"`   // debug, info, warn, error
	Format string `yaml:"format" json:"format"` // console or json
}

// Default is the one source of defaults: what `serve` runs on with no config file.
func Default() Config {
	return Config{
		ShippedPlaybooks: true,
		Database:         Database{StartupWait: time.Minute},
		Web: Web{
			ListenAddress: "127.0.0.1:9095",
			MaxBodyBytes:  1 << 20,
			LinkTTL:       DefaultLinkTTL,
		},
		Storage: Storage{Path: "./data", Backend: BackendLocal, Compression: storage.DefaultCompression, Links: LinksRoute,
			S3: S3{PartSize: storage.DefaultPartSize, Concurrency: storage.DefaultConcurrency, LinkExpiry: storage.DefaultLinkExpiry}},
		Runs: Runs{
			MaxConcurrent:     4,
			MaxAttempts:       3,
			DefaultTimeout:    10 * time.Minute,
			HeartbeatInterval: 5 * time.Second,
			LeaseTimeout:      20 * time.Second,
			ShutdownGrace:     20 * time.Second,
			Lookback:          10 * time.Minute,
			AbandonGrace:      10 * time.Second,
			MaxArtifactBytes:  DefaultMaxArtifactBytes,
		},
		Retention:  Retention{Artifacts: RetainArtifactsDelete, Interval: time.Hour},
		Profiling:  defaultProfiling(),
		Prometheus: Prometheus{URL: "http://localhost:9090", Timeout: 10 * time.Second},
		Traces:     Traces{Backend: "jaeger", Service: "vllm-server", Timeout: 10 * time.Second},
		Targets:    Targets{Allow: []string{"127.0.0.0/8", "::1/128", "localhost"}},
		Notify: Notify{Console: Console{Enabled: true},
			Slack: Slack{APIURL: DefaultSlackAPIURL, Pace: Pace{PerSecond: 1, Burst: 3}, ChannelLabel: "slack_channel"},
			Storm: Storm{Threshold: 10, Window: time.Minute}},
		Log: Log{Level: "info", Format: "console"},
	}
}
