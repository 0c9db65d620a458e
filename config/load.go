package config

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"

	"github.com/autocapture/autocapture/internal/yamlerr"
)

// Load reads a config file over Default: fields the file leaves out keep their
// defaults; unknown fields and bad values are file:line:col errors. Secrets' _file
// twins are read. An empty path returns Default.
func Load(path string) (*Config, error) {
	cfg := Default()
	if path == "" {
		return &cfg, cfg.Validate()
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(path, data)
}

// Parse decodes YAML data named file over Default and validates it. A file it
// refuses gets every problem at once (unknown keys, values of the wrong type,
// failed checks) as a yamlerr.List in the order of the file.
func Parse(file string, data []byte) (*Config, error) {
	cfg := Default()
	f, err := parser.ParseBytes(data, 0)
	if err != nil {
		return nil, yamlerr.FromParse(file, data, err)
	}
	if len(f.Docs) > 1 {
		return nil, &yamlerr.Error{File: file, Msg: "one YAML document expected"}
	}
	var errs yamlerr.List
	v := validator{file: file, f: f}
	if len(f.Docs) == 1 && f.Docs[0].Body != nil {
		errs, v.refused = decode(file, f, &cfg)
	}
	v.resolveSecrets(&cfg)
	v.check(&cfg)
	v.checkTLSFiles(cfg.Web.TLS)
	// Every problem at once, in the order of the file: a value of the wrong
	// type does not hide the rest, nor the checks of the values around it.
	errs = append(errs, v.errs...)
	errs.SortByPosition()
	if err := errs.Err(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// Validate checks a config the same way a file is, for one built in code or
// changed after loading (flags). It reads no secret files: Parse did that once.
func (c *Config) Validate() error {
	v := validator{}
	v.check(c)
	return v.errs.Err()
}

type validator struct {
	file   string
	f      *ast.File
	errs   yamlerr.List
	unread []string // secrets whose _file twin could not be read
	// refused holds the key paths whose value decode refused (they kept
	// their default): a check of what is at or under one is not reported,
	// as the default is not what the file says.
	refused []string
}

// errorf records a problem at the node of a YAML path such as "$.web.listen_address",
// or at the file when that path is not in it (a default).
func (v *validator) errorf(path, format string, args ...any) {
	for _, r := range v.refused {
		if p := strings.TrimPrefix(path, "$."); p == r || strings.HasPrefix(p, r+".") || strings.HasPrefix(p, r+"[") {
			return
		}
	}
	var node ast.Node
	if v.f != nil {
		if p, err := yaml.PathString(path); err == nil {
			node, _ = p.FilterFile(v.f)
		}
	}
	v.errs = append(v.errs, yamlerr.At(v.file, node, "%s: %s", strings.TrimPrefix(path, "$."), fmt.Sprintf(format, args...)))
}

// resolveSecrets reads each secret's _file twin into the secret, once, at load.
// A twin that cannot be read is remembered, so checkSecrets does not report it
// a second time as empty.
func (v *validator) resolveSecrets(c *Config) {
	for _, s := range secrets(c) {
		if err := resolve(s.value, *s.file, s.name); err != nil {
			v.errorf(s.path+"_file", "%v", err)
			v.unread = append(v.unread, s.path)
		}
	}
}

// secretField is one Secret of the config with its _file twin.
type secretField struct {
	path  string // YAML path of the secret, e.g. $.web.auth.bearer_token
	name  string // its key, for messages
	value *Secret
	file  *string
}

// secrets lists every Secret with a _file twin: resolveSecrets and checkSecrets
// walk the same list, so a new secret cannot be read but left unchecked.
func secrets(c *Config) []secretField {
	out := []secretField{
		{"$.web.auth.bearer_token", "bearer_token", &c.Web.Auth.BearerToken, &c.Web.Auth.BearerTokenFile},
		{"$.database.url", "url", &c.Database.URL, &c.Database.URLFile},
		{"$.notify.slack.token", "token", &c.Notify.Slack.Token, &c.Notify.Slack.TokenFile},
		{"$.notify.slack.signing_secret", "signing_secret", &c.Notify.Slack.SigningSecret, &c.Notify.Slack.SigningSecretFile},
		{"$.alertmanager.bearer_token", "bearer_token", &c.Alertmanager.BearerToken, &c.Alertmanager.BearerTokenFile},
		{"$.storage.s3.secret_access_key", "secret_access_key", &c.Storage.S3.SecretAccessKey, &c.Storage.S3.SecretAccessKeyFile},
		{"$.web.link_secret", "link_secret", &c.Web.LinkSecret, &c.Web.LinkSecretFile},
		{"$.profiling.agent_token", "agent_token", &c.Profiling.AgentToken, &c.Profiling.AgentTokenFile},
	}
	if ba := c.Web.Auth.BasicAuth; ba != nil {
		out = append(out, secretField{"$.web.auth.basic_auth.password", "password", &ba.Password, &ba.PasswordFile})
	}
	if ba := c.Alertmanager.BasicAuth; ba != nil {
		out = append(out, secretField{"$.alertmanager.basic_auth.password", "password", &ba.Password, &ba.PasswordFile})
	}
	return out
}

// checkSecrets refuses a secret that holds nothing: a _file twin read empty (or
// only whitespace), or never read at all, and an inline value of only
// whitespace. Auth that compares against nothing would let every request in.
// Messages name the file, never the content.
func (v *validator) checkSecrets(c *Config) {
	for _, s := range secrets(c) {
		switch {
		case slices.Contains(v.unread, s.path):
		case *s.file != "" && s.value.Blank():
			v.errorf(s.path+"_file", "%q is empty or holds only whitespace; a secret file must hold the secret", *s.file)
		case *s.file == "" && *s.value != "" && s.value.Blank():
			v.errorf(s.path, "holds only whitespace; set the secret or remove the field")
		}
	}
	if ba := c.Web.Auth.BasicAuth; ba != nil && ba.Password == "" && ba.PasswordFile == "" {
		v.errorf("$.web.auth.basic_auth", "password (or password_file) is required")
	}
}

func (v *validator) check(c *Config) {
	if ba := c.Web.Auth.BasicAuth; ba != nil && ba.Username == "" {
		v.errorf("$.web.auth.basic_auth", "username is required")
	}
	v.checkSecrets(c)
	v.checkWeb(c)
	v.checkTrustedProxy(c.Web.Auth.TrustedProxy)
	v.checkStorage(c.Storage)
	if u := c.Database.URL.Reveal(); u != "" && !strings.HasPrefix(u, "postgres://") && !strings.HasPrefix(u, "postgresql://") {
		v.errorf("$.database.url", "want postgres://… (leave empty for the embedded SQLite)")
	}
	v.checkRuns(c.Runs)
	v.checkDatabase(c.Database)
	v.checkLinks(c)
	v.checkRetention(c.Retention)
	v.checkProfiling(c.Profiling)
	v.checkSlack(c.Notify.Slack)
	v.checkActions(c.Notify.Slack)
	v.checkAlertmanager(c)
	v.checkStorm(c.Notify.Storm)
	for _, g := range c.Playbooks {
		if _, err := filepath.Match(g, ""); err != nil {
			v.errorf("$.playbooks", "bad glob %q: %v", g, err)
		}
	}
	if !c.ShippedPlaybooks && len(c.Playbooks) == 0 {
		v.errorf("$.shipped_playbooks", "false with no playbooks: files: no playbook would run; name your files in playbooks: or keep the shipped set")
	}
	if c.Prometheus.URL != "" {
		v.checkURL("$.prometheus.url", c.Prometheus.URL)
	}
	if c.Traces.URL != "" {
		v.checkURL("$.traces.url", c.Traces.URL)
	}
	if c.Traces.Backend != "jaeger" && c.Traces.Backend != "tempo" {
		v.errorf("$.traces.backend", "want jaeger or tempo, got %q", c.Traces.Backend)
	}
	for i, a := range c.Targets.Allow {
		if err := checkAllowEntry(a); err != nil {
			v.errorf(fmt.Sprintf("$.targets.allow[%d]", i), "%v", err)
		}
	}
	for i, n := range c.Targets.Names {
		if err := CheckTargetName(n); err != nil {
			v.errorf(fmt.Sprintf("$.targets.names[%d]", i), "%v", err)
		}
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		v.errorf("$.log.level", "want debug, info, warn or error, got %q", c.Log.Level)
	}
	if c.Log.Format != "console" && c.Log.Format != "json" {
		v.errorf("$.log.format", "want console or json, got %q", c.Log.Format)
	}
}

func (v *validator) checkWeb(c *Config) {
	host, _, err := net.SplitHostPort(c.Web.ListenAddress)
	if err != nil {
		v.errorf("$.web.listen_address", "%v", err)
		return
	}
	if c.Web.MaxBodyBytes <= 0 {
		v.errorf("$.web.max_body_bytes", "must be positive")
	}
	v.checkTLS(c.Web.TLS)
	if !IsLoopbackHost(host) && !c.Web.Auth.Enabled() && !c.Web.ClientCertAuth() && !c.Web.AllowUnauthenticated {
		v.errorf("$.web.listen_address", "listening on %q without webhook auth: set web.auth (bearer_token or basic_auth), or web.allow_unauthenticated: true to accept that anyone who reaches this port can start captures", c.Web.ListenAddress)
	}
}

func (v *validator) checkDatabase(d Database) {
	if d.StartupWait < 0 {
		v.errorf("$.database.startup_wait", "must not be negative")
	}
}

func (v *validator) checkRuns(r Runs) {
	if r.MaxConcurrent < 1 {
		v.errorf("$.runs.max_concurrent", "must be at least 1")
	}
	if r.MaxAttempts < 1 {
		v.errorf("$.runs.max_attempts", "must be at least 1")
	}
	if r.HeartbeatInterval <= 0 {
		v.errorf("$.runs.heartbeat_interval", "must be positive")
	}
	if r.LeaseTimeout < 2*r.HeartbeatInterval {
		v.errorf("$.runs.lease_timeout", "must be at least twice heartbeat_interval (%s)", r.HeartbeatInterval)
	}
	// A crashed run resumes after its lease expires plus up to two reaper ticks
	// (one heartbeat_interval each): the promise is within a minute.
	if r.LeaseTimeout+2*r.HeartbeatInterval > time.Minute {
		v.errorf("$.runs.lease_timeout", "lease_timeout + 2 x heartbeat_interval must stay within 1m, so a crashed run resumes within a minute")
	}
	if r.ShutdownGrace < 0 || r.Lookback < 0 || r.AbandonGrace < 0 {
		v.errorf("$.runs", "shutdown_grace, lookback and abandon_grace must not be negative")
	}
	if r.DefaultTimeout <= 0 {
		v.errorf("$.runs.default_timeout", "must be positive")
	}
	if r.Replica != "" && (len(r.Replica) > 45 || !replicaName.MatchString(r.Replica)) {
		v.errorf("$.runs.replica", "want lower-case letters and digits, single '_' or '-' between them, at most 45 characters (it names a queue), got %q", r.Replica)
	}
}

// replicaName is what runs.replica may be: it ends the upload queue's name
// autocapture_upload_<replica>, which River limits to 64 characters.
var replicaName = regexp.MustCompile(`^[a-z0-9]+(?:[_-]?[a-z0-9]+)*$`)

func (v *validator) checkURL(path, raw string) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		v.errorf(path, "want an http(s) URL, got %q", raw)
	}
}

// IsLoopbackHost says whether a listen host stays on this machine.
func IsLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// checkAllowEntry checks the shape of one allow-list entry: a CIDR must parse;
// hosts, host:port and :port entries are matched at connect time.
// CheckTargetName checks a targets.names entry: a host name, *.suffix or *
// (the one rule, which the targets package applies too).
func CheckTargetName(s string) error {
	t := strings.TrimSpace(s)
	if t == "*" || strings.HasPrefix(t, "*.") && len(t) > 2 && !strings.Contains(t[2:], "*") && !strings.ContainsAny(t, "[]:@/ ") {
		return nil
	}
	if t == "" || strings.ContainsAny(t, "*[]:@/ ") {
		return fmt.Errorf("name %q: want a host name, *.suffix or *", s)
	}
	return nil
}

func checkAllowEntry(s string) error {
	if s == "" {
		return fmt.Errorf("empty entry")
	}
	if strings.Contains(s, "/") {
		if _, err := netip.ParsePrefix(s); err != nil {
			return fmt.Errorf("bad CIDR %q: %v", s, err)
		}
		return nil
	}
	return nil
}

// decode decodes the document body over cfg (Default) with the decoder the
// playbooks share (yamlerr.Decode): one bad value hides no other, each error
// names its key path and what is wanted, an unknown key gets the closest
// known key of its level, and the values that are well typed are decoded so
// the validator still checks them. bad holds the key paths refused. Secrets
// are never quoted back.
func decode(file string, f *ast.File, cfg *Config) (errs yamlerr.List, bad []string) {
	return yamlerr.Decode(f.Docs[0].Body, cfg, yamlerr.Options{
		File: file, AST: f, Root: "the config",
		Reset:   func() { *cfg = Default() },
		Secrets: []reflect.Type{reflect.TypeFor[Secret]()},
	})
}

// Partial decodes what a config file says well, for a caller that goes on
// past the file's errors (check reports the playbooks it names): values
// refused keep their defaults and refused lists their key paths. Secrets'
// _file twins are not read and nothing is validated. Nil when the file
// cannot be read or is not one YAML document.
func Partial(path string) (cfg *Config, refused []string) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil
	}
	f, err := parser.ParseBytes(data, 0)
	if err != nil || len(f.Docs) != 1 || f.Docs[0].Body == nil {
		return nil, nil
	}
	c := Default()
	_, refused = decode(path, f, &c)
	return &c, refused
}
