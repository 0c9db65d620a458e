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

// Alertmanager is a running Alertmanager started by StartAlertmanager,
// StartAlertmanagerWith or StartAlertmanagerPair.
type Alertmanager struct {
	// URL is its base URL, http://127.0.0.1:PORT (also its external URL).
	URL string
	// ClusterAddr is its gossip address, 127.0.0.1:PORT ("" with clustering off).
	ClusterAddr string
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
	return StartAlertmanagerWith(t, AlertmanagerOptions{Config: configYAML})
}

// AlertmanagerOptions shape an Alertmanager started by StartAlertmanagerWith.
type AlertmanagerOptions struct {
	// Config is the content of alertmanager.yml.
	Config string
	// Cluster turns HA mode on: gossip on a free 127.0.0.1 port (ClusterPort
	// when set), joining Peers.
	Cluster bool
	// ClusterPort is the cluster listen port when Cluster is set; 0 picks one.
	ClusterPort int
	// Peers are other members' cluster addresses (host:port), each passed as
	// --cluster.peer.
	Peers []string
	// Flags are more command-line flags, e.g. --cluster.peer-timeout=2s.
	Flags []string
}

// StartAlertmanagerWith starts prometheus-alertmanager as o says on a free
// 127.0.0.1 web port, storage in a temporary directory, and waits for
// /-/ready (not for its cluster: see StartAlertmanagerPair).
func StartAlertmanagerWith(t testing.TB, o AlertmanagerOptions) *Alertmanager {
	t.Helper()
	bin := Tool(t, "prometheus-alertmanager")
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "alertmanager.yml")
	if err := os.WriteFile(cfgPath, []byte(o.Config), 0o644); err != nil {
		t.Fatal(err)
	}
	am := &Alertmanager{}
	clusterPort := o.ClusterPort
	am.Proc = startServer(t, "alertmanager", 30*time.Second, func() (*Process, string) {
		port := FreePort(t)
		am.URL = fmt.Sprintf("http://127.0.0.1:%d", port)
		args := []string{
			"--config.file=" + cfgPath,
			"--storage.path=" + filepath.Join(dir, "data"),
			fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port),
			"--web.external-url=" + am.URL,
		}
		if o.Cluster {
			if clusterPort == 0 {
				clusterPort = FreePort(t)
			}
			am.ClusterAddr = fmt.Sprintf("127.0.0.1:%d", clusterPort)
			// Advertised as it listens: loopback only, and Alertmanager
			// refuses to guess an address for an unspecified one.
			args = append(args, "--cluster.listen-address="+am.ClusterAddr, "--cluster.advertise-address="+am.ClusterAddr)
			for _, p := range o.Peers {
				args = append(args, "--cluster.peer="+p)
			}
			clusterPort = 0 // a retry after a port race takes a fresh one
		} else {
			args = append(args, "--cluster.listen-address=")
		}
		args = append(args, o.Flags...)
		return StartProcess(t, "alertmanager", exec.Command(bin, args...)), am.URL + "/-/ready"
	})
	return am
}

// StartAlertmanagerPair starts two Alertmanagers with configYAML gossiping
// as an HA pair on loopback cluster ports, each listing the other as its
// peer, and waits until each counts both members. Gossip and its settling
// are made fast for tests; flags adds to them (e.g. --cluster.peer-timeout,
// how long the second member waits for the first's notification).
func StartAlertmanagerPair(t testing.TB, configYAML string, flags ...string) [2]*Alertmanager {
	t.Helper()
	fast := append([]string{"--cluster.gossip-interval=50ms", "--cluster.pushpull-interval=2s",
		"--cluster.settle-timeout=5s", "--cluster.reconnect-interval=1s", "--cluster.probe-interval=200ms"}, flags...)
	second := FreePort(t)
	a := StartAlertmanagerWith(t, AlertmanagerOptions{Config: configYAML, Cluster: true,
		Peers: []string{fmt.Sprintf("127.0.0.1:%d", second)}, Flags: fast})
	b := StartAlertmanagerWith(t, AlertmanagerOptions{Config: configYAML, Cluster: true, ClusterPort: second,
		Peers: []string{a.ClusterAddr}, Flags: fast})
	pair := [2]*Alertmanager{a, b}
	deadline := time.Now().Add(30 * time.Second)
	for _, am := range pair {
		for {
			n, status, err := am.clusterPeers()
			if err == nil && n == 2 && status == "ready" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("testenv: alertmanager %s: cluster of %d peers, %q (%v), want 2 ready\n%s", am.URL, n, status, err,
					tail(am.Proc.Logs(), 4096))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return pair
}

// clusterPeers reads the cluster's member count and status from
// /api/v2/status.
func (a *Alertmanager) clusterPeers() (int, string, error) {
	resp, err := http.Get(a.URL + "/api/v2/status")
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var st struct {
		Cluster struct {
			Status string            `json:"status"`
			Peers  []json.RawMessage `json:"peers"`
		} `json:"cluster"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return 0, "", err
	}
	return len(st.Cluster.Peers), st.Cluster.Status, nil
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
