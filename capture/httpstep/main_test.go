package httpstep_test

import (
	"testing"

	"github.com/autocapture/autocapture/capture"
	"github.com/autocapture/autocapture/internal/testkit/steptest"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vocab"
)

// TestMain runs the package's tests through testenv, as capture's.
func TestMain(m *testing.M) { testenv.Main(m) }

// testEnv is an Env with a local store and the default (loopback-only) allow-list.
func testEnv(t *testing.T) (*vocab.Env, *storage.Local) { return steptest.Env(t) }

// buildStep builds a registered kind from a config filled by fill.
func buildStep[C any](t *testing.T, kind string, fill func(*C)) vocab.Step {
	t.Helper()
	k, ok := capture.Lookup(kind)
	if !ok {
		t.Fatalf("kind %q not registered", kind)
	}
	return steptest.Build(t, k, fill)
}

// readArtifact reads a stored object back whole.
func readArtifact(t *testing.T, st *storage.Local, key string) string {
	return steptest.ReadArtifact(t, st, key)
}
