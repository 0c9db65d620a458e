// Package config is the daemon's own configuration: one YAML file decoded strictly,
// defaults from one value (Default), secrets that never print.
package config

import (
	"time"

	"github.com/autocapture/autocapture/storage"
)

// Config is the daemon's whole configuration: one YAML file, every key
// optional (what a file leaves out keeps its default), decoded strictly:
// unknown keys and bad values are errors with file:line:col, every one at
// once. config.example.yaml shows every key with its default.
//
// Flags in Prometheus style override the file:
//
//   - --config.file: the YAML config (none: the embedded defaults);
//   - --web.listen-address overrides web.listen_address;
//   - --storage.path overrides storage.path;
//   - --log.level and --log.format override log.level and log.format.
//
// Secrets (web.auth.bearer_token, web.auth.basic_auth.password,
// database.url, notify.slack.token, notify.slack.signing_secret,
// storage.s3.secret_access_key, web.link_secret, profiling.agent_token) each
// have a _file twin and print as <secret> everywhere. A _file twin is read
// once at startup with surrounding whitespace trimmed; an empty,
// whitespace-only or unreadable file is a startup error naming the file (auth
// with nothing to compare would let every request in), and so is basic_auth
// without a password. Setting a secret and its _file twin both is an error.
type Config struct {
	// Web is the HTTP listener (webhook, API, pages, /metrics) and who may
	// call it.
	Web Web `yaml:"web" json:"web"`
	// Storage is where the embedded run store and the artifacts live.
	Storage Storage `yaml:"storage" json:"storage"`
	// Database chooses the run store: the embedded SQLite or a PostgreSQL
	// several replicas share.
	Database Database `yaml:"database" json:"database"`
	// Runs bounds and paces run execution, and sets the lease that resumes
	// a run after a crash.
	Runs Runs `yaml:"runs" json:"runs"`
	// Retention is how long finished runs and their artifacts are kept.
	Retention Retention `yaml:"retention" json:"retention"`
	// Profiling is tier 3's guard: the fleet budget for framed profiles.
	Profiling Profiling `yaml:"profiling" json:"profiling"`
	// Playbooks lists playbook files (globs), tried in lexical order before
	// the shipped vLLM playbooks (a shipped one runs after a match only with
	// continue: true); a playbook named as a shipped one replaces it. Edits
	// reload by themselves (also SIGHUP, POST /-/reload); a broken edit keeps
	// the last good set and sets autocapture_config_last_reload_successful
	// to 0.
	Playbooks []string `yaml:"playbooks" json:"playbooks"`
	// ShippedPlaybooks keeps the shipped vLLM playbooks under the files
	// playbooks names (a file's playbook of the same name replaces a shipped
	// one); false loads the files alone.
	ShippedPlaybooks bool `yaml:"shipped_playbooks" json:"shipped_playbooks"`
	// Prometheus is the Prometheus tier 1's queries go to.
	Prometheus Prometheus `yaml:"prometheus" json:"prometheus"`
	// Traces is the trace backend tier 2 searches.
	Traces Traces `yaml:"traces" json:"traces"`
	// Alertmanager is where the Slack Silence action makes its silences.
	Alertmanager Alertmanager `yaml:"alertmanager" json:"alertmanager"`
	// Targets is the allow-list for addresses taken from alert labels.
	Targets Targets `yaml:"targets" json:"targets"`
	// Notify chooses where threads go: the console, Slack, or both.
	Notify Notify `yaml:"notify" json:"notify"`
	// Log sets the daemon's logger.
	Log Log `yaml:"log" json:"log"`
}

// Web is the HTTP listener and the webhook's guard.
type Web struct {
	// ListenAddress is where the webhook, the API, the pages and /metrics
	// listen (--web.listen-address overrides it). Listening beyond loopback
	// requires web.auth (or a client certificate that authenticates, see
	// web.tls), or allow_unauthenticated: true.
	ListenAddress string `yaml:"listen_address" json:"listen_address"`
	// ExternalURL is how people reach this daemon, for links in threads (the
	// run's page, each artifact). Empty: links use listen_address when it
	// names one host (not 0.0.0.0 or ::), else a thread has none; the daemon
	// warns once at startup either way.
	ExternalURL string `yaml:"external_url" json:"external_url"`
	// MaxBodyBytes caps a webhook body; larger gets 413.
	MaxBodyBytes int64 `yaml:"max_body_bytes" json:"max_body_bytes"`
	// AllowUnauthenticated lets a non-loopback listener run without webhook
	// auth: anyone who reaches the port can start captures (not recommended).
	AllowUnauthenticated bool `yaml:"allow_unauthenticated" json:"allow_unauthenticated"`
	// Auth is what Alertmanager's webhook_configs[].http_config sends, and
	// who may read the run pages.
	Auth Auth `yaml:"auth" json:"auth"`
	// LinkSecret signs the links in threads, each artifact's and the
	// parent's "Run page" button (HMAC-SHA256, at least 16 bytes, e.g.
	// openssl rand -hex 32); empty: a key generated once and kept in the
	// database (autocapture_keys), shared by every replica.
	LinkSecret Secret `yaml:"link_secret" json:"link_secret"`
	// LinkSecretFile is the _file twin of LinkSecret.
	LinkSecretFile string `yaml:"link_secret_file" json:"link_secret_file"`
	// LinkTTL is how long a link in a thread works: each artifact's (with
	// storage.links: route; on S3 a click is then redirected to a presigned
	// URL made at that moment) and the parent's "Run page" button, a token
	// that opens that run's page and nothing else, signed again at each edit
	// of the parent.
	LinkTTL time.Duration `yaml:"link_ttl" json:"link_ttl"`
	// TLS serves the listener over TLS, optionally with client certificates;
	// off by default.
	TLS TLS `yaml:"tls" json:"tls"`
}

// ClientCertAuth says whether a verified client certificate authenticates a
// request on its own (web.tls.client_cert_authenticates).
func (w Web) ClientCertAuth() bool { return w.TLS.Enabled() && w.TLS.ClientCertAuthenticates }

// Auth is what Alertmanager's http_config sends: a bearer token or basic auth.
// The trusted proxy (web.auth.trusted_proxy) adds a way for people, not
// Alertmanager, to read the run pages.
type Auth struct {
	// BearerToken is the token Alertmanager sends
	// (http_config.authorization.credentials); it guards the webhook, the
	// API and /-/reload, compared in constant time.
	BearerToken Secret `yaml:"bearer_token" json:"bearer_token"`
	// BearerTokenFile is the _file twin of BearerToken (trimmed, as
	// Alertmanager trims its credentials_file, so one file serves both).
	BearerTokenFile string `yaml:"bearer_token_file" json:"bearer_token_file"`
	// BasicAuth is the username and password Alertmanager sends
	// (http_config.basic_auth), instead of or beside the token; nil: off.
	BasicAuth *BasicAuth `yaml:"basic_auth" json:"basic_auth,omitempty"`
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
	// Username is the user Alertmanager sends; required.
	Username string `yaml:"username" json:"username"`
	// Password is the user's password; it or password_file is required.
	Password Secret `yaml:"password" json:"password"`
	// PasswordFile is the _file twin of Password.
	PasswordFile string `yaml:"password_file" json:"password_file"`
}

// Database chooses the run store: empty URL means SQLite under storage.path;
// postgres://… means PostgreSQL (several replicas may share it).
type Database struct {
	// URL is empty for the embedded SQLite under storage.path (one process
	// only), or postgres://user@host:5432/db for PostgreSQL, which several
	// replicas can share without running any alert twice.
	URL Secret `yaml:"url" json:"url"`
	// URLFile is the _file twin of URL (it usually holds a password).
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
	// MaxConcurrent caps runs executing at once in this process (fleet
	// capacity is the sum over replicas); the rest wait queued, a resumed
	// run like any other (storm control).
	MaxConcurrent int `yaml:"max_concurrent" json:"max_concurrent"`
	// MaxAttempts bounds how often a run is started (first try + resumes
	// after crashes) before it fails with the reason.
	MaxAttempts int `yaml:"max_attempts" json:"max_attempts"`
	// DefaultTimeout bounds a run whose playbook sets no timeout (a
	// playbook's timeout counts from the run's first start, across
	// attempts).
	DefaultTimeout time.Duration `yaml:"default_timeout" json:"default_timeout"`
	// HeartbeatInterval is how often the worker holding a run renews its
	// lease on the run row (and a thread's deliverer its lease on the
	// thread): one statement per process per interval, which must finish
	// within it.
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval" json:"heartbeat_interval"`
	// LeaseTimeout: a run whose lease is older is resumed by any live
	// process after its last persisted step (crash recovery), and a dead
	// replica's threads move to a live one within lease_timeout +
	// heartbeat_interval. At least twice heartbeat_interval (keep it several
	// intervals long), and lease_timeout + 2 x heartbeat_interval within 1m.
	LeaseTimeout time.Duration `yaml:"lease_timeout" json:"lease_timeout"`
	// ShutdownGrace is how long running steps may finish after SIGTERM; the
	// rest resume after restart.
	ShutdownGrace time.Duration `yaml:"shutdown_grace" json:"shutdown_grace"`
	// Lookback is how far before the alert's startsAt its window begins; the
	// window ends when the alert arrived.
	Lookback time.Duration `yaml:"lookback" json:"lookback"`
	// AbandonGrace: a step still running this long after its deadline (it
	// ignores its context) is recorded as timed out and the run moves on.
	AbandonGrace time.Duration `yaml:"abandon_grace" json:"abandon_grace"`
	// MaxArtifactBytes caps what one run stores over all its steps and
	// attempts (what it recorded before counts, and parallel steps share
	// it); 0 is unlimited. The put that would pass it is cut off, its partial
	// object removed, and its step fails with reason too-large, naming the
	// cap and the run's total; the run's other artifacts stay.
	MaxArtifactBytes int64 `yaml:"max_artifact_bytes" json:"max_artifact_bytes"`
	// Replica is this process's stable name: with storage.backend s3, the
	// artifacts it spools while the bucket is down wait in its own folder
	// (storage.path/spool) and queue (autocapture_upload_<replica>); threads
	// name replicas by it. Give each a stable name and a persistent volume
	// (a StatefulSet). Lower-case letters and digits, single _ or - between
	// them, at most 45 characters. Empty: the hostname, sanitized.
	Replica string `yaml:"replica" json:"replica"`
}

// Prometheus is the Prometheus the tier-1 queries go to.
type Prometheus struct {
	// URL is the Prometheus that evaluates the vLLM alert rules. Empty: the
	// steps that need PromQL (the snapshot, peers, GPU, charts) are not
	// configured, which is not a failure; triage then reads the instance's
	// own /metrics.
	URL string `yaml:"url" json:"url"`
	// Timeout bounds each query unless a step sets its own.
	Timeout time.Duration `yaml:"timeout" json:"timeout"`
}

// Traces is the trace backend tier 2 searches.
type Traces struct {
	// Backend names the backend's query API: jaeger or tempo.
	Backend string `yaml:"backend" json:"backend"`
	// URL is the trace backend's query API (Jaeger's UI port, e.g.
	// http://jaeger:16686, or Tempo's); empty turns tier 2 off (its steps
	// are not configured).
	URL string `yaml:"url" json:"url"`
	// Service is the service.name of vLLM's llm_request spans
	// (OTEL_SERVICE_NAME on the server).
	Service string `yaml:"service" json:"service"`
	// Timeout bounds each query to the backend.
	Timeout time.Duration `yaml:"timeout" json:"timeout"`
}

// Targets is the allow-list for addresses taken from alert labels.
type Targets struct {
	// Allow lists what an address taken from an alert label (scrape, http,
	// profile) must match: a host name, host:port, a CIDR or :port, checked
	// on the ip:port actually dialed, redirects included. A cloud metadata
	// address and the daemon's own need an entry naming them exactly, other
	// link-local ones an entry covering them (see docs/safety.md).
	Allow []string `yaml:"allow" json:"allow"`
	// FromPrometheus also allows any instance Prometheus currently scrapes
	// (up{instance=...}); it never exempts a metadata or link-local address.
	FromPrometheus bool `yaml:"from_prometheus" json:"from_prometheus"`
	// Names are the host names that may be looked up in DNS to check their
	// addresses against the CIDRs: an exact name, *.suffix (any name under
	// it) or * (every name). A name no allow entry names and no pattern
	// matches is refused before any lookup, so label text never reaches a
	// resolver. The default names only in-cluster names (.svc,
	// .cluster.local), which no outside server can answer (see
	// docs/safety.md).
	Names []string `yaml:"names" json:"names"`
}

// Notify chooses where threads go: the console (the default), Slack, or both.
type Notify struct {
	// Console prints each run's thread to stdout.
	Console Console `yaml:"console" json:"console"`
	// Slack posts each run's thread to a Slack channel.
	Slack Slack `yaml:"slack" json:"slack"`
	// Storm shares one thread among many runs: a storm of alerts in one
	// webhook, or a fleet of instances of one model.
	Storm Storm `yaml:"storm" json:"storm"`
}

// Console is the stdout notifier.
type Console struct {
	// Enabled prints one block per run event to stdout.
	Enabled bool `yaml:"enabled" json:"enabled"`
}

// Log sets the daemon's logger.
type Log struct {
	// Level is the least severity logged: debug, info, warn or error
	// (--log.level overrides it).
	Level string `yaml:"level" json:"level"`
	// Format is how a line is written: console or json (--log.format
	// overrides it).
	Format string `yaml:"format" json:"format"`
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
		Retention:    Retention{Artifacts: RetainArtifactsDelete, Interval: time.Hour},
		Profiling:    defaultProfiling(),
		Prometheus:   Prometheus{URL: "http://localhost:9090", Timeout: 10 * time.Second},
		Alertmanager: Alertmanager{Timeout: 10 * time.Second},
		Traces:       Traces{Backend: "jaeger", Service: "vllm-server", Timeout: 10 * time.Second},
		Targets:      Targets{Allow: []string{"127.0.0.0/8", "::1/128", "localhost"}, Names: []string{"*.svc", "*.cluster.local"}},
		Notify: Notify{Console: Console{Enabled: true},
			Slack: Slack{APIURL: DefaultSlackAPIURL, Pace: Pace{PerSecond: 1, Burst: 3}, ChannelLabel: "slack_channel"},
			Storm: Storm{Threshold: 10, Window: time.Minute}},
		Log: Log{Level: "info", Format: "console"},
	}
}
