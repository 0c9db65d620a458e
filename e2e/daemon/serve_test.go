package daemon

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
)

// TestServeBadInput sends the bad-input table to the real binary: each gets
// its code and a JSON reason, and the daemon keeps serving.
func TestServeBadInput(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, &daemonOpts{Token: "e2e-token"})
	now := time.Now()
	good := webhookBody("BadInputGood", "1234567890abcdef", "firing", now)
	mixed := []byte(`{"version":"4","alerts":[` +
		`{"status":"firing","labels":{"alertname":"Mixed"},"startsAt":"` + now.UTC().Format(time.RFC3339) + `"},` +
		`{"status":"firing","labels":{"instance":"x"},"startsAt":"` + now.UTC().Format(time.RFC3339) + `"}]}`)
	tests := []struct {
		name    string
		body    []byte
		auth    string
		ctype   string // "" sends application/json
		code    int
		errWord string
	}{
		{name: "not JSON", body: []byte("{"), code: 400, errWord: "not_json"},
		{name: "wrong types", body: []byte(`{"version":"4","alerts":{"a":1}}`), code: 400, errWord: "no_alerts"},
		{name: "empty alerts", body: []byte(`{"version":"4","alerts":[]}`), code: 400, errWord: "no_alerts"},
		{name: "unknown version", body: []byte(`{"version":"3","alerts":[]}`), code: 400, errWord: "bad_version"},
		{name: "2 MiB body", body: append(append([]byte(`{"version":"4","x":"`), bytes.Repeat([]byte("a"), 2<<20)...), `"}`...), code: 413, errWord: "body_too_large"},
		{name: "absent token", body: good, auth: "none", code: 401, errWord: "unauthorized"},
		{name: "wrong token", body: good, auth: "Bearer e2e-tokem", code: 401, errWord: "unauthorized"},
		{name: "one bad alert among good ones", body: mixed, code: 200},
		{name: "form-encoded, as a browser's cross-site form", body: good, ctype: "application/x-www-form-urlencoded", code: 415, errWord: "unsupported_media_type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", d.URL+"/hooks/alertmanager", bytes.NewReader(tt.body))
			req.Header.Set("Content-Type", cmp.Or(tt.ctype, "application/json"))
			switch tt.auth {
			case "none":
			case "":
				req.Header.Set("Authorization", "Bearer "+d.Token)
			default:
				req.Header.Set("Authorization", tt.auth)
			}
			code, b := doRaw(t, req)
			if code != tt.code {
				t.Fatalf("code %d, want %d: %s", code, tt.code, b)
			}
			var e struct{ Status, Error, Reason string }
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatalf("answer is not JSON: %s", b)
			}
			if tt.errWord != "" && (e.Error != tt.errWord || e.Reason == "") {
				t.Fatalf("answer %s, want error %q with a reason", b, tt.errWord)
			}
		})
	}
	if runs := d.runs(t, "Mixed"); len(runs) != 1 {
		t.Errorf("the good alert of the mixed body made %d runs, want 1", len(runs))
	}
	if v := d.metric(t, `autocapture_alerts_rejected_total{reason="missing_alertname"}`); v != 1 {
		t.Errorf("rejected missing_alertname = %v, want 1", v)
	}
	if code, b := d.post(t, good); code != 200 {
		t.Fatalf("daemon stopped serving good webhooks: %d %s", code, b)
	}
	d.Proc.WaitHTTP(t, d.URL+"/-/healthy", 5*time.Second)
	d.Proc.Stop()
	if err := d.Proc.Err(); err != nil {
		t.Errorf("SIGTERM: daemon exited with %v, want status 0", err)
	}
}

// TestServeListenGuard: beyond loopback without auth, serve refuses to start
// and says why; with auth it starts.
func TestServeListenGuard(t *testing.T) {
	t.Parallel()
	bin := testenv.BuildBinary(t, "./cmd/autocapture")
	port := testenv.FreePort(t)
	dir := t.TempDir()
	t.Run("no auth refuses", func(t *testing.T) {
		cmd := exec.Command(bin, "serve", "--storage.path", dir, fmt.Sprintf("--web.listen-address=0.0.0.0:%d", port))
		p := testenv.StartProcess(t, "autocapture-refuses", cmd)
		select {
		case <-p.Done():
		case <-time.After(30 * time.Second):
			t.Fatal("serve did not exit")
		}
		if p.Err() == nil {
			t.Fatal("serve exited 0 on a non-loopback listener without auth")
		}
		if logs := p.Logs(); !strings.Contains(logs, "without webhook auth") || !strings.Contains(logs, "allow_unauthenticated") {
			t.Fatalf("message does not say why:\n%s", logs)
		}
		if _, err := os.Stat(filepath.Join(dir, "autocapture.db")); err == nil {
			t.Error("serve created its store before refusing")
		}
	})
	// An empty token file is no auth: before, it resolved to "" while the guard
	// still saw auth on, and the daemon answered 200 to anyone on 0.0.0.0.
	for name, content := range map[string]string{"empty token file": "", "newline-only token file": "\n", "whitespace token file": " \t\n"} {
		t.Run(name+" refuses", func(t *testing.T) {
			sub := t.TempDir()
			tok, cfg := filepath.Join(sub, "token"), filepath.Join(sub, "c.yaml")
			os.WriteFile(tok, []byte(content), 0o600)
			os.WriteFile(cfg, []byte("web:\n  auth:\n    bearer_token_file: "+tok+"\n"), 0o600)
			cmd := exec.Command(bin, "serve", "--config.file", cfg, "--storage.path", sub,
				fmt.Sprintf("--web.listen-address=0.0.0.0:%d", port))
			p := testenv.StartProcess(t, "autocapture-empty-token", cmd)
			select {
			case <-p.Done():
			case <-time.After(30 * time.Second):
				t.Fatal("serve did not exit")
			}
			if p.Err() == nil {
				t.Fatal("serve exited 0 with an empty bearer_token_file")
			}
			if logs := p.Logs(); !strings.Contains(logs, tok) || !strings.Contains(logs, "bearer_token_file") || !strings.Contains(logs, "empty") {
				t.Fatalf("message does not name the empty file %s:\n%s", tok, logs)
			}
			if _, err := os.Stat(filepath.Join(sub, "autocapture.db")); err == nil {
				t.Error("serve created its store before refusing")
			}
		})
	}
	t.Run("with auth starts", func(t *testing.T) {
		cfg, pb := filepath.Join(dir, "auth.yaml"), filepath.Join(dir, "none.yaml")
		os.WriteFile(pb, []byte("playbooks: []\n"), 0o600)
		os.WriteFile(cfg, []byte("web:\n  auth:\n    bearer_token: guard-token\nplaybooks: ["+pb+"]\n"), 0o600)
		cmd := exec.Command(bin, "serve", "--config.file", cfg, "--storage.path", dir,
			fmt.Sprintf("--web.listen-address=0.0.0.0:%d", port))
		p := testenv.StartProcess(t, "autocapture-auth", cmd)
		p.WaitHTTP(t, fmt.Sprintf("http://127.0.0.1:%d/-/healthy", port), 30*time.Second)
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/api/v1/runs", port))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Errorf("runs API without token: %d, want 401", resp.StatusCode)
		}
	})
}
