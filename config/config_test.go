package config

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
)

func TestParseKeepsDefaultsForOmittedFields(t *testing.T) {
	cfg, err := Parse("c.yaml", []byte("runs:\n  max_concurrent: 9\nprometheus:\n  url: http://127.0.0.1:9999\n"))
	if err != nil {
		t.Fatal(err)
	}
	d := Default()
	if cfg.Runs.MaxConcurrent != 9 || cfg.Prometheus.URL != "http://127.0.0.1:9999" {
		t.Fatalf("set fields not applied: %+v", cfg.Runs)
	}
	if cfg.Runs.HeartbeatInterval != d.Runs.HeartbeatInterval || cfg.Prometheus.Timeout != d.Prometheus.Timeout || cfg.Web.ListenAddress != d.Web.ListenAddress {
		t.Fatalf("defaults lost: %+v", cfg)
	}
}

func TestParseErrorsNameFileLineColumn(t *testing.T) {
	cases := []struct {
		name, yaml, want string
	}{
		{"unknown field", "web:\n  listen_address: 127.0.0.1:1\n  listen_adress: x\n", "c.yaml:3:3: unknown field \"listen_adress\""},
		{"bad duration", "runs:\n  lease_timeout: soon\n", "c.yaml:2:"},
		{"bad level", "log:\n  level: loud\n", "c.yaml:2:10: log.level: want debug"},
		{"open without auth", "web:\n  listen_address: 0.0.0.0:9095\n", "c.yaml:2:19: web.listen_address: listening on \"0.0.0.0:9095\" without webhook auth"},
		{"lease vs heartbeat", "runs:\n  heartbeat_interval: 10s\n  lease_timeout: 15s\n", "c.yaml:3:18: runs.lease_timeout: must be at least twice"},
		{"lease past the minute", "runs:\n  heartbeat_interval: 10s\n  lease_timeout: 50s\n", "c.yaml:3:18: runs.lease_timeout: lease_timeout + 2 x heartbeat_interval must stay within 1m"},
		{"replica not a queue name", "runs:\n  replica: Pod_0.example\n", "c.yaml:2:12: runs.replica: want lower-case letters"},
		{"replica too long", "runs:\n  replica: " + strings.Repeat("a", 46) + "\n", "c.yaml:2:12: runs.replica: want lower-case letters"},
		{"bad cidr", "targets:\n  allow: [10.0.0.0/99]\n", "c.yaml:2:11: targets.allow[0]: bad CIDR"},
		{"bad target name", "targets:\n  names: ['a.*.svc']\n", `c.yaml:2:11: targets.names[0]: name "a.*.svc": want a host name, *.suffix or *`},
		{"not postgres", "database:\n  url: mysql://x\n", "c.yaml:2:8: database.url: want postgres://"},
		{"syntax", "web: [\n", "c.yaml:"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("c.yaml", []byte(c.yaml))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to contain %q", err, c.want)
			}
		})
	}
}

func TestNonLoopbackWithAuthOrOptOutStarts(t *testing.T) {
	for _, y := range []string{
		"web:\n  listen_address: 0.0.0.0:9095\n  auth:\n    bearer_token: s3cret\n",
		"web:\n  listen_address: 0.0.0.0:9095\n  auth:\n    basic_auth: {username: am, password: pw}\n",
		"web:\n  listen_address: 0.0.0.0:9095\n  allow_unauthenticated: true\n",
		"web:\n  listen_address: '[::1]:9095'\n",
	} {
		if _, err := Parse("c.yaml", []byte(y)); err != nil {
			t.Errorf("%q: %v", y, err)
		}
	}
}

func TestSecretsNeverPrintAndFileTwinsLoad(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte("from-file-token\n"), 0o600)
	y := fmt.Sprintf("web:\n  auth:\n    bearer_token_file: %s\n    basic_auth: {username: am, password: hunter2}\ndatabase:\n  url: postgres://u:dbpass@127.0.0.1/x\n", tok)
	cfg, err := Parse("c.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Web.Auth.BearerToken.Reveal() != "from-file-token" {
		t.Fatalf("token from file = %q", cfg.Web.Auth.BearerToken.Reveal())
	}
	j, _ := json.Marshal(cfg)
	ym, _ := yaml.Marshal(cfg)
	for _, out := range []string{string(j), string(ym), fmt.Sprintf("%v %+v %#v", cfg, cfg, cfg)} {
		for _, secret := range []string{"from-file-token", "hunter2", "dbpass"} {
			if strings.Contains(out, secret) {
				t.Fatalf("secret %q printed in %s", secret, out)
			}
		}
	}
	// Validating again (after flags change the config) must not re-read the files.
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate after Parse with _file secrets: %v", err)
	}
	both := "web:\n  auth:\n    bearer_token: a\n    bearer_token_file: " + tok + "\n"
	if _, err := Parse("c.yaml", []byte(both)); err == nil || !strings.Contains(err.Error(), "both set") {
		t.Fatalf("both token and file: %v", err)
	}
}

func TestDefaultIsValidAndExampleParses(t *testing.T) {
	d := Default()
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	if d.Runs.LeaseTimeout > time.Minute {
		t.Fatal("lease timeout must let a crashed run resume within a minute")
	}
	cfg, err := Load(filepath.Join("..", "config.example.yaml"))
	if err != nil {
		t.Fatalf("config.example.yaml: %v", err)
	}
	if cfg.Web.MaxBodyBytes != 1<<20 {
		t.Fatalf("example max body = %d", cfg.Web.MaxBodyBytes)
	}
}

// TestEmptySecretIsALoadError: a secret whose _file twin is empty, holds only
// whitespace or cannot be read is a load error at that field naming the file;
// an inline secret of only whitespace or a basic_auth without a password too.
// Before, an empty token file resolved to "" and the listen guard still saw
// auth as on: the daemon listened on 0.0.0.0 and let every request through.
func TestEmptySecretIsALoadError(t *testing.T) {
	dir := t.TempDir()
	empty, newline, blank := writeFile(t, dir, "empty", ""), writeFile(t, dir, "newline", "\n"), writeFile(t, dir, "blank", " \t\r\n \n")
	missing := filepath.Join(dir, "missing")
	open := "web:\n  listen_address: 0.0.0.0:9095\n  auth:\n"
	cases := []parseErrCase{
		{"empty token file", open + "    bearer_token_file: " + empty + "\n",
			[]string{"c.yaml:4:24: web.auth.bearer_token_file:", empty, "empty"}},
		{"newline token file", open + "    bearer_token_file: " + newline + "\n",
			[]string{"c.yaml:4:24: web.auth.bearer_token_file:", newline, "empty"}},
		{"whitespace token file", open + "    bearer_token_file: " + blank + "\n",
			[]string{"c.yaml:4:24: web.auth.bearer_token_file:", blank, "empty"}},
		{"missing token file", open + "    bearer_token_file: " + missing + "\n",
			[]string{"c.yaml:4:24: web.auth.bearer_token_file:", missing}},
		{"whitespace inline token", open + "    bearer_token: '  '\n",
			[]string{"c.yaml:4:19: web.auth.bearer_token:", "whitespace"}},
		{"empty password file", open + "    basic_auth: {username: am, password_file: " + empty + "}\n",
			[]string{"web.auth.basic_auth.password_file:", empty, "empty"}},
		{"no password", open + "    basic_auth: {username: am}\n",
			[]string{"web.auth.basic_auth:", "password"}},
		{"empty database url file", "database:\n  url_file: " + newline + "\n",
			[]string{"c.yaml:2:13: database.url_file:", newline, "empty"}},
	}
	checkParseErrors(t, cases, nil)
}

// TestValidateRefusesAnUnreadSecretFile: a config built in code (or changed
// after loading) with a _file twin whose secret was never read has no
// credential: Validate must not count it as auth.
func TestValidateRefusesAnUnreadSecretFile(t *testing.T) {
	c := Default()
	c.Web.ListenAddress = "0.0.0.0:9095"
	c.Web.Auth.BearerTokenFile = "/run/secrets/token"
	if c.Web.Auth.Enabled() {
		t.Error("Enabled() with a token file but no token read: there is nothing to compare")
	}
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "/run/secrets/token") {
		t.Fatalf("Validate = %v, want an error naming the unread file", err)
	}
}

// TestSecretFileIsTrimmedLikeAlertmanagers: Alertmanager's credentials_file is
// sent with surrounding whitespace trimmed; the daemon reads its twin the same
// way, so one file serves both sides.
func TestSecretFileIsTrimmedLikeAlertmanagers(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tok, []byte("  tok-123 \r\n"), 0o600)
	cfg, err := Parse("c.yaml", []byte("web:\n  auth:\n    bearer_token_file: "+tok+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Web.Auth.BearerToken.Reveal(); got != "tok-123" {
		t.Fatalf("token = %q, want %q", got, "tok-123")
	}
}
