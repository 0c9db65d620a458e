// Package steptest is what the step families' tests share.
package steptest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/targets"
	"github.com/autocapture/autocapture/vocab"
)

// Env is an Env with a local store and the default (loopback-only) allow-list.
func Env(t *testing.T) (*vocab.Env, *storage.Local) {
	t.Helper()
	st, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pol, err := targets.New(config.Default().Targets, targets.Options{
		LookupIP: func(_ context.Context, host string) ([]netip.Addr, error) {
			t.Errorf("unexpected DNS lookup of %q", host)
			return nil, io.EOF
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &vocab.Env{Store: st, Targets: pol.Client(5 * time.Second)}, st
}

// Build builds a step of kind k from a config filled by fill.
func Build[C any](t *testing.T, k vocab.Kind, fill func(*C)) vocab.Step {
	t.Helper()
	cfg, ok := k.Config().(*C)
	if !ok {
		t.Fatalf("kind %q config is %T", k.Name, k.Config())
	}
	fill(cfg)
	s, err := k.Build(cfg)
	if err != nil {
		t.Fatalf("build %s: %v", k.Name, err)
	}
	return s
}

// ReadArtifact reads a stored object back whole.
func ReadArtifact(t *testing.T, st *storage.Local, key string) string {
	t.Helper()
	rc, err := st.Open(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	return string(b)
}

// PromTS is the unix time a PromInput's window ends at, and the time the
// fake Prometheus answers of the Prometheus families' tests carry.
const PromTS = 1.8e9

// PromOK writes a Prometheus API success answer carrying data.
func PromOK(w http.ResponseWriter, data string) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"status":"success","data":%s}`, data)
}

// PromInput is an Input against url with a local store and a one-hour window
// ending at PromTS.
func PromInput(t testing.TB, url string) *vocab.Input {
	t.Helper()
	store, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	end := time.Unix(PromTS, 0)
	return &vocab.Input{RunID: "r1", StepID: "snapshot", Window: vocab.Window{Start: end.Add(-time.Hour), End: end},
		Env: &vocab.Env{Store: store, Prometheus: &vocab.Endpoint{URL: url, Client: http.DefaultClient, Timeout: 5 * time.Second}}}
}
