package testenv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Alertmanager is a running single-instance Alertmanager started by
// StartAlertmanager.
type Alertmanager struct {
	// URL is its base URL, http://127.0.0.1:PORT (also its external URL).
	URL string
	// Proc is the server process.
	Proc *Process
}

// PostableAlert is one alert as POST /api/v2/alerts takes it. Zero times are
// left out, so Alertmanager fills them in.
type PostableAlert struct {
	// Labels identify the alert; alertname is customary.
	Labels map[string]string
	// Annotations carry descriptive text.
	Annotations map[string]string
	// StartsAt defaults to now on the server.
	StartsAt time.Time
	// EndsAt, when in the past, resolves the alert.
	EndsAt time.Time
	// GeneratorURL links back to the alert's source.
	GeneratorURL string
}

// MarshalJSON renders the alert in Alertmanager's API v2 shape.
func (a PostableAlert) MarshalJSON() ([]byte, error) {
	type wire struct {
		Labels       map[string]string `json:"labels"`
		Annotations  map[string]string `json:"annotations,omitempty"`
		StartsAt     *time.Time        `json:"startsAt,omitempty"`
		EndsAt       *time.Time        `json:"endsAt,omitempty"`
		GeneratorURL string            `json:"generatorURL,omitempty"`
	}
	w := wire{Labels: a.Labels, Annotations: a.Annotations, GeneratorURL: a.GeneratorURL}
	if w.Labels == nil {
		w.Labels = map[string]string{}
	}
	if !a.StartsAt.IsZero() {
		w.StartsAt = &a.StartsAt
	}
	if !a.EndsAt.IsZero() {
		w.EndsAt = &a.EndsAt
	}
	return json.Marshal(w)
}

// StartAlertmanager starts prometheus-alertmanager with configYAML as its
// configuration on a free 127.0.0.1 port, clustering off and storage in a
// temporary directory, and waits for /-/ready.
func StartAlertmanager(t testing.TB, configYAML string) *Alertmanager {
	t.Helper()
	bin := Tool(t, "prometheus-alertmanager")
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "alertmanager.yml")
	if err := os.WriteFile(cfgPath, []byte(configYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	am := &Alertmanager{}
	am.Proc = startServer(t, "alertmanager", 30*time.Second, func() (*Process, string) {
		port := FreePort(t)
		am.URL = fmt.Sprintf("http://127.0.0.1:%d", port)
		cmd := exec.Command(bin,
			"--config.file="+cfgPath,
			"--storage.path="+filepath.Join(dir, "data"),
			fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port),
			"--web.external-url="+am.URL,
			"--cluster.listen-address=",
		)
		return StartProcess(t, "alertmanager", cmd), am.URL + "/-/ready"
	})
	return am
}

// PostAlerts sends alerts to POST /api/v2/alerts and fails the test unless
// Alertmanager accepts them.
func (a *Alertmanager) PostAlerts(t testing.TB, alerts ...PostableAlert) {
	t.Helper()
	if alerts == nil {
		alerts = []PostableAlert{}
	}
	body, err := json.Marshal(alerts)
	if err != nil {
		t.Fatalf("testenv: alertmanager: encode alerts: %v", err)
	}
	resp, err := http.Post(a.URL+"/api/v2/alerts", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("testenv: alertmanager: post alerts: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("testenv: alertmanager: post alerts: %s: %s", resp.Status, b)
	}
}
