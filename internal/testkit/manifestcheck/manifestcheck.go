// Package manifestcheck is a test helper: it checks a run's manifest.json
// against the run (as the runs API lists it) and the store holding its
// objects, for the daemon's end-to-end tests (cmd/autocapture, e2e).
package manifestcheck

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/autocapture/autocapture/runner/artifacts"
	"github.com/autocapture/autocapture/runner/runs"
)

// Read returns a stored object's bytes as stored and their Content-Encoding.
type Read func(key string) ([]byte, string, error)

// Check checks what the storage issue asks of a finished run r: its manifest
// sits in the run's folder of the documented layout
// (yyyy/mm/dd/<alertname>/<run>/manifest.json), names every artifact the runs
// API lists, each under <plan>/<step>/ of that folder, and records the
// stored bytes' sha256 and size. It returns how many artifacts it checked.
func Check(t testing.TB, r *runs.Run, read Read) int {
	t.Helper()
	folder := r.CreatedAt.UTC().Format("2006/01/02") + "/" + r.Alertname + "/" + r.ID + "/"
	if r.Manifest != folder+"manifest.json" {
		t.Errorf("run %s: manifest %q, want %q", r.ID, r.Manifest, folder+"manifest.json")
		return 0
	}
	raw, enc, err := read(r.Manifest)
	if err != nil {
		t.Errorf("run %s: manifest: %v", r.ID, err)
		return 0
	}
	var m artifacts.Manifest
	if err := json.Unmarshal(Decode(t, raw, enc), &m); err != nil {
		t.Errorf("run %s: manifest: %v", r.ID, err)
		return 0
	}
	if m.Run.ID != r.ID || m.Run.Status != r.Status {
		t.Errorf("manifest run %s %s, want run %s %s", m.Run.ID, m.Run.Status, r.ID, r.Status)
	}
	if len(m.Playbooks) != len(r.Playbooks) {
		t.Errorf("run %s: the manifest has %d playbooks, the run %d", r.ID, len(m.Playbooks), len(r.Playbooks))
	}
	for i := range min(len(m.Playbooks), len(r.Playbooks)) {
		if m.Playbooks[i].Name != r.Playbooks[i].Name || m.Playbooks[i].Digest != r.Playbooks[i].Digest {
			t.Errorf("run %s: manifest playbook %s (%.12s), the run's %s (%.12s)", r.ID,
				m.Playbooks[i].Name, m.Playbooks[i].Digest, r.Playbooks[i].Name, r.Playbooks[i].Digest)
		}
	}
	checked := 0
	inManifest := map[string]bool{}
	for _, pb := range m.Playbooks {
		for _, st := range pb.Steps {
			for _, a := range st.Artifacts {
				inManifest[a.Key] = true
				if !strings.HasPrefix(a.Key, folder+pb.Name+"/"+st.ID+"/") {
					t.Errorf("run %s: %s is not under %s%s/%s/", r.ID, a.Key, folder, pb.Name, st.ID)
				}
				body, _, err := read(a.Key)
				if err != nil {
					t.Errorf("run %s: the manifest names %s: %v", r.ID, a.Key, err)
					continue
				}
				sum := sha256.Sum256(body)
				if hex.EncodeToString(sum[:]) != a.SHA256 || int64(len(body)) != a.Size {
					t.Errorf("run %s: %s holds %d bytes sha256 %x; the manifest says %d bytes %s", r.ID, a.Key, len(body), sum, a.Size, a.SHA256)
				}
				checked++
			}
		}
	}
	for _, st := range r.Steps {
		for _, a := range st.Artifacts {
			if !inManifest[a.Key] {
				t.Errorf("run %s: the API lists %s, the manifest does not", r.ID, a.Key)
			}
		}
	}
	return checked
}

// Decode undoes a stored Content-Encoding (gzip, zstd or none).
func Decode(t testing.TB, b []byte, enc string) []byte {
	t.Helper()
	var rd io.Reader
	switch enc {
	case "":
		return b
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		rd = zr
	case "zstd":
		zr, err := zstd.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer zr.Close()
		rd = zr
	default:
		t.Fatalf("unknown content encoding %q", enc)
	}
	out, err := io.ReadAll(rd)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
