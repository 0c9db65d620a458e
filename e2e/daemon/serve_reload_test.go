package daemon

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// playbookNamed is a playbook file with one triage-only playbook for alertname A.
func playbookNamed(name string) string {
	return "playbooks:\n  - name: " + name + "\n    match: ['alertname=\"A\"']\n    steps:\n      - id: triage\n        triage: {}\n"
}

// planOf posts a new firing alert A and returns the playbook its run executed.
func planOf(t *testing.T, d *daemon, fingerprint string) string {
	t.Helper()
	code, b := d.post(t, webhookBody("A", fingerprint, "firing", time.Now()))
	if code != 200 {
		t.Fatalf("webhook: %d %s", code, b)
	}
	id := runID(b)
	var names []string
	waitFor(t, 20*time.Second, "the run to record its playbook", func() bool {
		req, _ := http.NewRequest("GET", d.URL+"/api/v1/runs/"+id, nil)
		_, body := d.do(t, req)
		var r struct {
			Playbooks []struct {
				Name string `json:"name"`
			} `json:"playbooks"`
		}
		json.Unmarshal(body, &r)
		names = names[:0]
		for _, p := range r.Playbooks {
			names = append(names, p.Name)
		}
		return len(names) > 0
	})
	return strings.Join(names, ",")
}

// TestServeReloadsPlaybooks: an edit reloads by itself (fsnotify); a broken edit
// keeps the last good set, sets the success gauge to 0, and /-/reload answers
// with the file:line:col; SIGHUP reloads too.
func TestServeReloadsPlaybooks(t *testing.T) {
	t.Parallel()
	o := &daemonOpts{Token: "tok", Playbooks: playbookNamed("first")}
	d := startDaemon(t, o)
	file := filepath.Join(o.Dir, "playbooks.yaml")
	const ok, stamp = "autocapture_config_last_reload_successful", "autocapture_config_last_reload_success_timestamp_seconds"

	if got := planOf(t, d, "f1"); got != "first" {
		t.Fatalf("run used %q, want first", got)
	}

	// A broken edit: the watcher notices, the gauge drops, the old set stays.
	if err := os.WriteFile(file, []byte(playbookNamed("second")+"    bogus: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the broken edit to be noticed", func() bool { return d.metric(t, ok) == 0 })
	if got := planOf(t, d, "f2"); got != "first" {
		t.Fatalf("after a broken edit the run used %q, want the last good set (first)", got)
	}
	req, _ := http.NewRequest("POST", d.URL+"/-/reload", nil)
	code, body := d.do(t, req)
	if code != 500 || !strings.Contains(string(body), "playbooks.yaml:7:") {
		t.Fatalf("/-/reload with a broken file: %d %s", code, body)
	}

	// A good edit: reloaded without any signal.
	if err := os.WriteFile(file, []byte(playbookNamed("second")), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the good edit to be loaded", func() bool { return d.metric(t, ok) == 1 })
	if got := planOf(t, d, "f3"); got != "second" {
		t.Fatalf("after a good edit the run used %q, want second", got)
	}

	// SIGHUP reloads (the success timestamp moves).
	before := d.metric(t, stamp)
	time.Sleep(1100 * time.Millisecond)
	if err := d.Proc.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "SIGHUP to reload", func() bool { return d.metric(t, stamp) > before })
}
