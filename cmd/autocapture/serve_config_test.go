package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeConfigFlags checks the flag overrides in process, with no I/O.
func TestServeConfigFlags(t *testing.T) {
	tests := []struct {
		name    string
		flags   serveFlags
		wantErr string
		listen  string
	}{
		{name: "defaults", listen: "127.0.0.1:9095"},
		{name: "listen flag wins", flags: serveFlags{listenAddress: "[::1]:7000"}, listen: "[::1]:7000"},
		{name: "flag moving off loopback without auth", flags: serveFlags{listenAddress: "0.0.0.0:7000"}, wantErr: "without webhook auth"},
		{name: "bad listen flag", flags: serveFlags{listenAddress: "nope"}, wantErr: "listen_address"},
		{name: "missing file", flags: serveFlags{configFile: "/nonexistent/x.yaml"}, wantErr: "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := serveConfig(tt.flags)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || cfg.Web.ListenAddress != tt.listen {
				t.Fatalf("cfg %v err %v, want listen %s", cfg, err, tt.listen)
			}
		})
	}
}

// TestServeConfigFlagsWithSecretFiles: a token read from a file survives the
// re-validation after flags (config.Validate alone would refuse it).
func TestServeConfigFlagsWithSecretFiles(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte("file-token\n"), 0o600)
	cfgPath := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfgPath, []byte("web:\n  auth:\n    bearer_token_file: "+tok+"\n"), 0o600)
	cfg, err := serveConfig(serveFlags{configFile: cfgPath, listenAddress: "0.0.0.0:7000", storagePath: dir})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Web.Auth.BearerToken.Reveal() != "file-token" || cfg.Storage.Path != dir {
		t.Fatalf("token/storage not applied: %+v", cfg.Storage)
	}
	for name, content := range map[string]string{"empty": "", "newline only": "\n", "whitespace only": "  \r\n"} {
		os.WriteFile(tok, []byte(content), 0o600)
		for _, f := range []serveFlags{{configFile: cfgPath}, {configFile: cfgPath, listenAddress: "0.0.0.0:7000"}} {
			if _, err := serveConfig(f); err == nil || !strings.Contains(err.Error(), tok) {
				t.Errorf("%s token file, flags %+v: err = %v, want a refusal naming %s", name, f, err, tok)
			}
		}
	}
}
